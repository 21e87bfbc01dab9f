"""Sums and means of finite floats that are exact and cannot overflow: the totals of eval results.

A float sum overflows to ``inf`` on two values of ``1e308`` (and `math.fsum` raises), though their
mean is ``1e308``. Every finite float is a whole multiple of ``2**-1074``, so `ExactSum` keeps the
sum as a Python integer of those units: exact whatever the order of `add` calls, never infinite,
and a mean rounded once, correctly, by integer true division (the mean of finite floats is never
larger than the largest of them, so it is a finite float too). `finite_number` is the one test of
what such a sum accepts.
"""

from __future__ import annotations

import math
import sys
from typing import Any

_UNIT_BITS = 1074
"""``2**-1074`` is the smallest positive float: every finite float is a whole number of these units."""


def finite_number(value: Any) -> float | None:
    """`value` as a float when it is a finite number (an int or float, not a bool, within the float range), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int wider than any float
        return None
    return number if math.isfinite(number) else None


class ExactSum:
    """A running sum of finite floats, exact and free of overflow (see the module docs)."""

    def __init__(self) -> None:
        self._units = 0

    def add(self, value: float) -> None:
        """Add one value.

        Raises:
            ValueError: `value` is not a finite number.
        """
        number = finite_number(value)
        if number is None:
            raise ValueError(f"{str(value)[:40]!r} is not a finite number")
        self.add_finite(number)

    def add_finite(self, number: float) -> None:
        """Add one value that `finite_number` has already turned into a finite float."""
        numerator, denominator = number.as_integer_ratio()
        self._units += numerator << (_UNIT_BITS - denominator.bit_length() + 1)

    def mean(self, count: int) -> float:
        """The sum divided by `count` (0.0 for none), correctly rounded: finite for finite values."""
        return self._units / (count << _UNIT_BITS) if count > 0 else 0.0

    @property
    def value(self) -> float:
        """The sum, correctly rounded; past the float range, the largest float of its sign."""
        try:
            return self._units / (1 << _UNIT_BITS)
        except OverflowError:
            return sys.float_info.max if self._units > 0 else -sys.float_info.max


__all__ = ["ExactSum", "finite_number"]
