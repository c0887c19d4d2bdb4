"""How the CLI's commands reach the control plane (``adapters``, ``dispatch``, ``gaps``).

Owns the CLI's own variables, ``HI_MOE_LORA_URL`` (the control plane to call) and
``HI_MOE_LORA_ADMIN_TOKEN`` (the bearer token sent), the options every such command shares
(``--url``, ``--token``, ``--json``, ``--timeout``) and :func:`run_with_client`, which
hands an action a :class:`~hi_moe_lora.control_api.ControlPlaneClient` and turns a failure into
one ``error:`` line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping

from hi_moe_lora.control_api import ControlPlaneClient, ControlPlaneError

ENV_URL = "HI_MOE_LORA_URL"
#: The same variable the control plane reads its bootstrap admin secret from.
ENV_TOKEN = "HI_MOE_LORA_ADMIN_TOKEN"
DEFAULT_URL = "http://127.0.0.1:8080"


class CommandError(Exception):
    """Bad usage found by a command itself (argparse cannot see it); exit status 1."""


def control_plane_url(environ: Mapping[str, str] | None = None) -> str:
    """``$HI_MOE_LORA_URL`` (trailing ``/`` dropped), or :data:`DEFAULT_URL` when unset/empty."""
    env = os.environ if environ is None else environ
    return env.get(ENV_URL, "").strip().rstrip("/") or DEFAULT_URL


def control_plane_token(environ: Mapping[str, str] | None = None) -> str | None:
    """``$HI_MOE_LORA_ADMIN_TOKEN``, or ``None`` when unset/empty."""
    env = os.environ if environ is None else environ
    return env.get(ENV_TOKEN, "").strip() or None


def common_options(timeout_s: float) -> argparse.ArgumentParser:
    """The parent parser of every command that calls the control plane."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url", default=None, help=f"control plane URL (default: ${ENV_URL} or {DEFAULT_URL})"
    )
    common.add_argument(
        "--token",
        default=None,
        help=f"bearer token to send (default: ${ENV_TOKEN}; prefer the variable: arguments are "
        "visible to other users of the machine)",
    )
    common.add_argument("--json", action="store_true", help="print raw JSON")
    common.add_argument(
        "--timeout", type=float, default=timeout_s, help="seconds (default: %(default)s)"
    )
    return common


def run_with_client(args: argparse.Namespace, action: Callable[[ControlPlaneClient], None]) -> int:
    """Run ``action`` with a client of ``args.url``; 0, or 1 with the error on stderr."""
    client = ControlPlaneClient(
        args.url or control_plane_url(),
        timeout_s=args.timeout,
        token=args.token or control_plane_token(),
    )
    try:
        action(client)
    except (CommandError, ControlPlaneError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
