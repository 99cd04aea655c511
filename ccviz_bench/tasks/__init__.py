"""The quality tasks of ``python -m ccviz bench``: each measures what the policies keep, or what that costs,
into result files."""
