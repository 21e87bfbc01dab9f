"""``verifiers.parsers.maybe_think_parser``."""

from v1 import MaybeThinkParser

__all__ = ["MaybeThinkParser"]
