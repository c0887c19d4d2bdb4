from __future__ import annotations

import pytest

from registry.errors import InvalidRequestError, NotFoundError
from registry.services.traffic import Arm, new_weights, pick, shares

ARMS = [Arm("1.0.0", 0.0, True), Arm("1.1.0", 0.2, False), Arm("1.2.0", 0.0, False)]


def test_active_gets_the_remainder() -> None:
    assert shares(ARMS) == pytest.approx({"1.0.0": 0.8, "1.1.0": 0.2, "1.2.0": 0.0})
    full = [Arm("1.0.0", 0.0, True), Arm("1.1.0", 1.0, False)]
    assert shares(full) == {"1.0.0": 0.0, "1.1.0": 1.0}


def test_without_an_active_version_candidates_share_everything() -> None:
    arms = [Arm("1.0.0", 0.1, False), Arm("1.1.0", 0.3, False)]
    assert shares(arms) == pytest.approx({"1.0.0": 0.25, "1.1.0": 0.75})
    assert shares([Arm("1.0.0", 0.0, False)]) == {"1.0.0": 0.0}


def test_new_weights_replace_the_split() -> None:
    assert new_weights(ARMS, {"1.2.0": 0.5}) == {"1.0.0": 0.0, "1.1.0": 0.0, "1.2.0": 0.5}
    assert new_weights(ARMS, {"1.0.0": 0.7, "1.1.0": 0.3}) == {
        "1.0.0": 0.0,
        "1.1.0": 0.3,
        "1.2.0": 0.0,
    }


@pytest.mark.parametrize(
    "split",
    [
        {"1.1.0": 0.7, "1.2.0": 0.4},
        {"1.1.0": -0.1},
        {"1.1.0": 1.5},
        {"1.1.0": float("nan")},
        {"1.0.0": 0.5, "1.1.0": 0.3},
    ],
)
def test_invalid_splits(split: dict[str, float]) -> None:
    with pytest.raises(InvalidRequestError):
        new_weights(ARMS, split)


def test_unknown_versions() -> None:
    with pytest.raises(NotFoundError):
        new_weights(ARMS, {"9.9.9": 0.1})


def test_pick() -> None:
    table = {"a": 0.5, "b": 0.0, "c": 0.5}
    assert pick(table, 0.0) == "a"
    assert pick(table, 0.49) == "a"
    assert pick(table, 0.5) == "c"
    assert pick(table, 0.999999) == "c"
    assert pick({"a": 0.0}, 0.3) is None
