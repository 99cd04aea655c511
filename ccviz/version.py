"""The version of ccviz, in a module of its own: the engine records it without importing the package it is part of."""

__version__ = "0.1.0"
