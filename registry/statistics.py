"""Running statistics of a version: exponential moving averages folded over a batch.

An EMA with weight ``alpha`` applied to values ``x1..xn`` in order turns a previous average ``e``
into ``e * (1 - alpha)**n + sum(alpha * (1 - alpha)**(n - i) * x_i)``, and, when there was no
previous average, starts from ``x1``. :func:`fold_ema` computes those three numbers once, so the
repository can apply a whole batch of outcomes with one atomic UPDATE per version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

EMA_ALPHA = 0.1


@dataclass(frozen=True)
class EmaFold:
    """``new = previous * decay + tail``, or ``first`` when there is no previous average."""

    decay: float
    tail: float
    first: float

    def apply(self, previous: float | None) -> float:
        return self.first if previous is None else previous * self.decay + self.tail


def fold_ema(values: Sequence[float], alpha: float = EMA_ALPHA) -> EmaFold:
    """The effect of feeding ``values`` (non-empty, in order) to an EMA with weight ``alpha``."""
    if not values:
        raise ValueError("fold_ema needs at least one value")
    keep = 1.0 - alpha
    decay, tail, first = 1.0, 0.0, values[0]
    for index, value in enumerate(values):
        decay *= keep
        tail = tail * keep + alpha * value
        if index:
            first = first * keep + alpha * value
    return EmaFold(decay, tail, first)
