"""This machine: whether a bind address names only it (the one rule for the control plane's and
vLLM's refusal to listen on other addresses without their secrets), its name as a file-name tag,
and whether a process of it still runs (for temporary files named ``<host>-<pid>-…``)."""

from __future__ import annotations

import ipaddress
import os
import socket


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


def host_tag() -> str:
    """This host's name, safe in a file name (at most 64 characters)."""
    return "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:64] or "host"


def process_gone(pid: int) -> bool:
    """Whether no process ``pid`` runs on this host (another user's process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
