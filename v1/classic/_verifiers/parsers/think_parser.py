"""``verifiers.parsers.think_parser``."""

from v1 import ThinkParser

__all__ = ["ThinkParser"]
