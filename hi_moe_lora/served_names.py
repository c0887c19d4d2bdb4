"""Adapter names, semantic versions and served names (``name`` or ``name@version``).

The one parse/format pair for the name vLLM serves an adapter version under. The control plane
always forwards ``name@version`` (a bare name would keep its first meaning in vLLM forever); the
resolver plugin, the registry and the front door all split and join names here. Standard library
only, so the plugin can use it inside vLLM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Lower-case letters, digits, ``.``, ``_`` and ``-``; starts with a letter or digit; ≤ 64.
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
#: semver.org 2.0.0: MAJOR.MINOR.PATCH, optional -prerelease and +build.
SEMVER_PATTERN = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
MAX_VERSION_LENGTH = 128
SEPARATOR = "@"


def is_valid_name(name: str) -> bool:
    return NAME_PATTERN.fullmatch(name) is not None


def is_valid_version(version: str) -> bool:
    return len(version) <= MAX_VERSION_LENGTH and SEMVER_PATTERN.fullmatch(version) is not None


@dataclass(frozen=True)
class ServedName:
    """An adapter (``version`` None: whichever version is active) or one pinned version."""

    name: str
    version: str | None = None

    def __str__(self) -> str:
        return self.name if self.version is None else format_served_name(self.name, self.version)


def format_served_name(name: str, version: str) -> str:
    """``name@version``: the model name vLLM serves that version under."""
    return f"{name}{SEPARATOR}{version}"


def parse_served_name(text: str) -> ServedName | None:
    """``name`` or ``name@version`` -> :class:`ServedName`; None if it cannot be an adapter's."""
    name, sep, version = text.partition(SEPARATOR)
    if not is_valid_name(name):
        return None
    if not sep:
        return ServedName(name)
    if not is_valid_version(version):
        return None
    return ServedName(name, version)
