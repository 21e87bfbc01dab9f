"""``verifiers.parsers.parser``."""

from v1 import Parser

__all__ = ["Parser"]
