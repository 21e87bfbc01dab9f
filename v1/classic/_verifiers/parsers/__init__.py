"""``verifiers.parsers``: the Parser family."""

from v1 import MaybeThinkParser, Parser, ThinkParser, XMLParser

__all__ = ["MaybeThinkParser", "Parser", "ThinkParser", "XMLParser"]
