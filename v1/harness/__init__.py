"""The `Harness`: runs a taskset's rows through a program, behind the interception endpoint."""

from v1.harness._harness import Harness

__all__ = ["Harness"]
