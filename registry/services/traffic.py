"""A/B traffic between an adapter's versions (pure functions, no database).

Semantics: each inactive version (a *candidate*) with a weight > 0 receives that fraction of the
adapter's requests; the active version receives the remainder ``1 - sum(candidate weights)``.
Candidate weights must sum to at most 1. A split given by the user replaces the previous one:
unlisted candidates drop to 0; the active version may be listed only with exactly the remainder.
Without an active version the candidates share all requests in proportion to their weights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from registry.errors import InvalidRequestError, NotFoundError

TOLERANCE = 1e-6


@dataclass(frozen=True)
class Arm:
    version: str
    weight: float
    active: bool


def shares(arms: Sequence[Arm]) -> dict[str, float]:
    """Fraction of requests each version receives."""
    candidates = {arm.version: arm.weight for arm in arms if not arm.active}
    total = sum(candidates.values())
    result = {arm.version: 0.0 for arm in arms}
    result.update(candidates)
    active = [arm for arm in arms if arm.active]
    if active:
        result[active[0].version] = max(0.0, 1.0 - total)
    elif total > 0:
        result.update({version: w / total for version, w in candidates.items()})
    return result


def new_weights(arms: Sequence[Arm], split: Mapping[str, float]) -> dict[str, float]:
    """Validate a user's split and return the weight to store for every version."""
    by_version = {arm.version: arm for arm in arms}
    unknown = sorted(set(split) - set(by_version))
    if unknown:
        raise NotFoundError(f"no version(s) {', '.join(unknown)}", code="version_not_found")
    for version, weight in split.items():
        if not math.isfinite(weight) or not 0.0 <= weight <= 1.0:
            raise InvalidRequestError(
                f"weight of {version} must be within [0, 1]: {weight}", code="invalid_traffic"
            )
    candidates = sum(w for v, w in split.items() if not by_version[v].active)
    if candidates > 1.0 + TOLERANCE:
        raise InvalidRequestError(
            f"candidate weights sum to {candidates:.6g} > 1", code="invalid_traffic"
        )
    remainder = 1.0 - candidates
    for version, weight in split.items():
        if by_version[version].active and abs(weight - remainder) > TOLERANCE:
            raise InvalidRequestError(
                f"the active version {version} receives the remainder {remainder:.6g}, "
                f"not {weight}",
                code="invalid_traffic",
            )
    return {
        arm.version: 0.0 if arm.active else min(1.0, split.get(arm.version, 0.0)) for arm in arms
    }


def pick(version_shares: Mapping[str, float], draw: float) -> str | None:
    """The version a uniform ``draw`` in [0, 1) selects; ``None`` if nothing gets traffic."""
    weighted = [(version, share) for version, share in version_shares.items() if share > 0]
    if not weighted:
        return None
    remaining = draw * sum(share for _, share in weighted)
    for version, share in weighted:
        remaining -= share
        if remaining < 0:
            return version
    return weighted[-1][0]
