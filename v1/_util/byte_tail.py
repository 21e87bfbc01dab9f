"""The last bytes of a stream: what a failed process's output ends with, in bounded memory."""

from __future__ import annotations


class ByteTail:
    """Keeps the last `limit` bytes added (amortized: trimmed once it holds twice that)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * self.limit:
            del self.data[: len(self.data) - self.limit]

    def text(self) -> str:
        return bytes(self.data[-self.limit :]).decode("utf-8", "replace")


__all__ = ["ByteTail"]
