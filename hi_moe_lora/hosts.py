"""Whether a bind address names only this machine: the one rule for the control plane's and
vLLM's refusal to listen on other addresses without their secrets."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """``localhost``, ``127.0.0.0/8`` or ``::1`` (also as ``[::1]``); a host name that may
    resolve to anything, or any other address, is not."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
