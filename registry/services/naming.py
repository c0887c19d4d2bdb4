"""The registry's rules for adapter names and versions, as typed errors.

The patterns and the ``name@version`` parse/format pair live in :mod:`hi_moe_lora.served_names`
(shared with the resolver plugin); this module turns a violation into the registry's errors.
"""

from __future__ import annotations

from hi_moe_lora.served_names import ServedName, is_valid_name, is_valid_version, parse_served_name
from registry.errors import InvalidRequestError, NotFoundError


def shown(value: str, limit: int = 80) -> str:
    """``value`` as an error message quotes it: ``repr`` (NUL and look-alikes visible), cut."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "…"


def check_name(name: str) -> str:
    if not is_valid_name(name):
        raise InvalidRequestError(
            f"invalid adapter name {shown(name)}: lower-case letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, at most 64 characters",
            code="invalid_name",
        )
    return name


def check_version(version: str) -> str:
    if not is_valid_version(version):
        raise InvalidRequestError(
            f"invalid version {shown(version)}: expected semantic version MAJOR.MINOR.PATCH "
            "with optional -prerelease and +build",
            code="invalid_version",
        )
    return version


def served_name_or_not_found(served_name: str) -> ServedName:
    """``name`` or ``name@version``; a malformed name is an adapter that does not exist."""
    parsed = parse_served_name(served_name)
    if parsed is None:
        raise NotFoundError(f"no adapter named {shown(served_name)}", code="adapter_not_found")
    return parsed


def name_or_not_found(name: str, version: str | None = None) -> None:
    """A malformed name (or version) is one that is not registered: 404 without a query, so
    look-alikes, NUL or 10,000 characters never reach the database."""
    if not is_valid_name(name):
        raise NotFoundError(f"no adapter named {shown(name)}", code="adapter_not_found")
    if version is not None and not is_valid_version(version):
        raise NotFoundError(f"{name}@{shown(version)} is not registered", code="version_not_found")
