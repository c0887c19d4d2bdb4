"""Adapter names, semantic versions and served names (``name`` or ``name@version``)."""

from __future__ import annotations

import re

from registry.errors import InvalidRequestError, NotFoundError

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
# semver.org 2.0.0: MAJOR.MINOR.PATCH, optional -prerelease and +build
SEMVER_PATTERN = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
MAX_VERSION_LENGTH = 128


def check_name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise InvalidRequestError(
            f"invalid adapter name {name!r}: lower-case letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, at most 64 characters",
            code="invalid_name",
        )
    return name


def check_version(version: str) -> str:
    if len(version) > MAX_VERSION_LENGTH or not SEMVER_PATTERN.fullmatch(version):
        raise InvalidRequestError(
            f"invalid version {version!r}: expected semantic version MAJOR.MINOR.PATCH "
            "with optional -prerelease and +build",
            code="invalid_version",
        )
    return version


def split_served_name(served_name: str) -> tuple[str, str | None]:
    """``name`` -> (name, None); ``name@version`` -> (name, version). Malformed -> NotFound."""
    name, sep, version = served_name.partition("@")
    if not NAME_PATTERN.fullmatch(name) or (
        sep and (not version or not SEMVER_PATTERN.fullmatch(version))
    ):
        raise NotFoundError(f"no adapter named {served_name!r}", code="adapter_not_found")
    return name, (version if sep else None)
