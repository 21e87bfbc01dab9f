"""``verifiers.parsers.xml_parser``."""

from v1 import XMLParser

__all__ = ["XMLParser"]
