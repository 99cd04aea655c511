"""Each task's tables, one module per task the report serves."""
