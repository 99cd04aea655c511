"""The engine probes of ``python -m ccviz bench``: each times or weighs the engine itself and prints a report
(never part of ``all``)."""
