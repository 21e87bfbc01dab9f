"""Random ids and secrets from the OS's CSPRNG, drawn 4 KiB at a time.

Every rollout needs a few: its trajectory id, its endpoint key, response ids. `os.urandom` is
one `getrandom` system call per draw, 20-50 us each on a virtual machine; drawing a block and
slicing it keeps the bytes exactly as unpredictable (they are the kernel's) for one call per
hundreds of ids. A forked child drops its parent's block, so the two never share bytes.
"""

from __future__ import annotations

import base64
import os
import threading

BLOCK_BYTES = 4096

_lock = threading.Lock()
_block = b""
_offset = 0


def random_bytes(count: int) -> bytes:
    """`count` bytes from the OS's CSPRNG (as `os.urandom`); thread-safe."""
    global _block, _offset
    if count > BLOCK_BYTES:
        return os.urandom(count)
    with _lock:
        if _offset + count > len(_block):
            _block, _offset = os.urandom(BLOCK_BYTES), 0
        chunk = _block[_offset : _offset + count]
        _offset += count
    return chunk


def token_hex(count: int) -> str:
    """`count` random bytes as hex (as `secrets.token_hex`)."""
    return random_bytes(count).hex()


def token_urlsafe(count: int) -> str:
    """`count` random bytes as unpadded URL-safe base64 (as `secrets.token_urlsafe`)."""
    return base64.urlsafe_b64encode(random_bytes(count)).rstrip(b"=").decode("ascii")


def uuid4_hex() -> str:
    """A random (version 4) UUID's 32 hex digits (as ``uuid.uuid4().hex``)."""
    drawn = bytearray(random_bytes(16))
    drawn[6] = (drawn[6] & 0x0F) | 0x40  # the version and variant bits `uuid.UUID(..., version=4)` sets
    drawn[8] = (drawn[8] & 0x3F) | 0x80
    return drawn.hex()


def random_bits(bits: int) -> int:
    """A random non-negative int below ``2**bits`` (as `secrets.randbits`)."""
    return int.from_bytes(random_bytes((bits + 7) // 8), "big") >> (-bits % 8)


def _forget_after_fork() -> None:
    global _lock, _block, _offset
    _lock, _block, _offset = threading.Lock(), b"", 0


os.register_at_fork(after_in_child=_forget_after_fork)

__all__ = ["BLOCK_BYTES", "random_bits", "random_bytes", "token_hex", "token_urlsafe", "uuid4_hex"]
