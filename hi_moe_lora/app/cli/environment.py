"""The CLI's own environment variable (the control plane's and the plugins' have their owners).

``HI_MOE_LORA_URL``: the control plane the admin commands talk to.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ENV_URL = "HI_MOE_LORA_URL"
DEFAULT_URL = "http://127.0.0.1:8080"


def control_plane_url(environ: Mapping[str, str] | None = None) -> str:
    """``$HI_MOE_LORA_URL`` (trailing ``/`` dropped), or :data:`DEFAULT_URL` when unset/empty."""
    env = os.environ if environ is None else environ
    return env.get(ENV_URL, "").strip().rstrip("/") or DEFAULT_URL
