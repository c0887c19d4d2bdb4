from __future__ import annotations

import random

import pytest

from registry.statistics import EMA_ALPHA, fold_ema


def _sequential(previous: float | None, values: list[float], alpha: float) -> float:
    average = previous
    for value in values:
        average = value if average is None else average + alpha * (value - average)
    assert average is not None
    return average


@pytest.mark.parametrize("previous", [None, 0.0, 37.5])
@pytest.mark.parametrize("count", [1, 2, 7, 60])
def test_fold_matches_feeding_values_one_by_one(previous: float | None, count: int) -> None:
    rng = random.Random(count)
    values = [rng.uniform(1.0, 500.0) for _ in range(count)]
    folded = fold_ema(values).apply(previous)
    assert folded == pytest.approx(_sequential(previous, values, EMA_ALPHA), rel=1e-12)


def test_fold_with_another_alpha() -> None:
    values = [1.0, 0.0, 1.0, 1.0]
    assert fold_ema(values, alpha=0.5).apply(0.25) == pytest.approx(_sequential(0.25, values, 0.5))


def test_a_single_value_without_history_is_that_value() -> None:
    assert fold_ema([42.0]).apply(None) == 42.0


def test_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        fold_ema([])
