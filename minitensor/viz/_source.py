"""`describe_source` lives in the core (minitensor/source.py), where error messages use it too;
viz re-exports it."""

from ..source import describe_source

__all__ = ["describe_source"]
