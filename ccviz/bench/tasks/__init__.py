"""The quality tasks of ``python -m ccviz bench``: each measures what the policies keep and what that costs, into result files."""
