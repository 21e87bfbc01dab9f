"""Where upstream API keys come from."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

PRIME_KEY_VAR = "PRIME_API_KEY"
NO_KEY = "EMPTY"


def resolve_api_key(api_key_var: str) -> str:
    """The key in `api_key_var`; for `PRIME_API_KEY`, then `~/.prime/config.json`; else ``"EMPTY"``.

    Local servers (vLLM, the built-in server, the mock) need no key, so a
    missing variable is logged rather than fatal here; `v1 eval` checks it up front.
    """
    value = os.environ.get(api_key_var)
    if value:
        return value
    if api_key_var == PRIME_KEY_VAR:
        config_path = Path.home() / ".prime" / "config.json"
        try:
            stored = json.loads(config_path.read_text()).get("api_key")
        except (OSError, ValueError, AttributeError):
            stored = None
        if stored:
            return str(stored)
    logger.debug("environment variable %s is not set; sending api key %r", api_key_var, NO_KEY)
    return NO_KEY


__all__ = ["NO_KEY", "PRIME_KEY_VAR", "resolve_api_key"]
