"""This process's limit on open files: raised to the most the system allows, and checked against the rollouts asked for.

Every rollout in flight holds at least one descriptor (its upstream connection), so a
soft limit of 1024, common by default, fails a run of thousands with "Too many open
files" (EMFILE) wherever the next descriptor happens to be opened. The soft limit may
be raised up to the hard limit without privileges; the hard limit is the system's.
"""

from __future__ import annotations

import contextlib
import resource

DESCRIPTOR_RESERVE = 256
"""Descriptors a run keeps for itself besides its rollouts' (modules, logs, the run folder, the endpoint's listener)."""


def raise_descriptor_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


def rollouts_within(descriptor_limit: int, wanted: int) -> int:
    """The most of `wanted` rollouts in flight that `descriptor_limit` open files hold: one descriptor per
    rollout (its upstream connection) beside `DESCRIPTOR_RESERVE`."""
    if descriptor_limit == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, descriptor_limit - DESCRIPTOR_RESERVE))


__all__ = ["DESCRIPTOR_RESERVE", "raise_descriptor_limit", "rollouts_within"]
