"""``verifiers.v1.types``."""

from v1.classic._verifiers.types import *  # noqa: F403
from v1.classic._verifiers.types import __all__ as __all__
