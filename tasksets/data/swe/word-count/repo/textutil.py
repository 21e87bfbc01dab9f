"""Small text helpers."""


def word_count(text):
    """How many words `text` has."""
    return len(text.split(" "))


def shout(text):
    """`text` in capitals, with an exclamation mark."""
    return text.upper() + "!"
