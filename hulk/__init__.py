"""Hulk: places large training jobs on a geo-distributed GPU fleet."""

__version__ = "0.1.0"
