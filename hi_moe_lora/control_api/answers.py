"""Answer shapes of the admin API that code (not only people) reads.

:class:`ResolvedAdapter` is the resolve contract: the control plane's service returns it, its
router serves it as JSON, and the resolver plugin parses it back with :meth:`from_json`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class AnswerError(ValueError):
    """An answer of the control plane that does not have the documented shape."""


@dataclass(frozen=True)
class ArtifactFile:
    """One file of a registered version, as the artifact endpoint serves it."""

    name: str
    size: int


@dataclass(frozen=True)
class ResolvedAdapter:
    """What vLLM needs to load one adapter version."""

    name: str
    version: str
    served_name: str
    lora_int_id: int
    local_path: str
    sha256: str
    rank: int
    alpha: float
    variant: str
    base_model: str
    #: The version's files (``paths.ARTIFACT`` serves each); ``None``: the answer did not say
    #: (an older control plane), so a fetch learns the sizes from the downloads.
    files: tuple[ArtifactFile, ...] | None = None

    @classmethod
    def from_json(cls, payload: Any) -> ResolvedAdapter:
        """Parse a resolve answer; raises :class:`AnswerError` naming what is wrong."""
        if not isinstance(payload, Mapping):
            raise AnswerError("resolve answer is not a JSON object")
        values: dict[str, Any] = {"files": _files(payload.get("files"))}
        for field in dataclasses.fields(cls):
            if field.name == "files":
                continue
            kind = {"int": int, "float": float}.get(str(field.type), str)
            raw = payload.get(field.name)
            if raw is None or isinstance(raw, (bool, dict, list)):
                raise AnswerError(f"resolve answer lacks a usable field {field.name!r}")
            try:
                values[field.name] = kind(raw)
            except (TypeError, ValueError):
                raise AnswerError(
                    f"resolve answer lacks a usable field {field.name!r}: {raw!r}"
                ) from None
        return cls(**values)


def _files(raw: Any) -> tuple[ArtifactFile, ...] | None:
    """The optional ``files`` list of a resolve answer (absent or null: unknown)."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise AnswerError("resolve answer's 'files' is not a list")
    files = []
    for item in raw:
        name = item.get("name") if isinstance(item, Mapping) else None
        size = item.get("size") if isinstance(item, Mapping) else None
        if not isinstance(name, str) or not name or isinstance(size, bool):
            raise AnswerError(f"resolve answer lists an unusable file: {item!r}")
        if not isinstance(size, int) or size < 0:
            raise AnswerError(f"resolve answer lists an unusable file: {item!r}")
        files.append(ArtifactFile(name=name, size=size))
    return tuple(files)
