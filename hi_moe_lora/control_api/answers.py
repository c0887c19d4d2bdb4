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

    @classmethod
    def from_json(cls, payload: Any) -> ResolvedAdapter:
        """Parse a resolve answer; raises :class:`AnswerError` naming what is wrong."""
        if not isinstance(payload, Mapping):
            raise AnswerError("resolve answer is not a JSON object")
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
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
