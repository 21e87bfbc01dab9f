"""Names and modules that moved: the old place keeps working, with a `DeprecationWarning`."""

from __future__ import annotations

import warnings


def warn_moved(old: str, new: str) -> None:
    """Warn that `old` (a module or name users imported) moved to `new`; call it from the old place.

    Args:
        old: what the user imported, e.g. ``"v1.sample_view"``.
        new: where it is now, e.g. ``"v1.print_prompt_completions_sample"``.
    """
    warnings.warn(f"{old} is deprecated and will be removed: use {new}", DeprecationWarning, stacklevel=3)


__all__ = ["warn_moved"]
