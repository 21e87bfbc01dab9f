"""Checkpoints are data: the one-line reason a file that ``torch.load(weights_only=True)`` refused was not loaded."""

from __future__ import annotations

import pickle
import re

__all__ = ["unpickling_reason"]


def unpickling_reason(error: pickle.UnpicklingError) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, in one line (torch's reason, without its advice to load it unsafely)."""
    found = re.search(r"WeightsUnpickler error: ([^.\n]*)", str(error))
    return f"it holds more than tensors and plain data ({found.group(1) if found else 'not loadable as data'})"
