"""ab_kernels.py's command line: trees and their environments (the timing needs a GPU)."""

from __future__ import annotations

import pytest

from tests.support.scripts import load_script

ab = load_script("benchmarks/kernels/ab_kernels.py")


def test_tree_env_items_become_each_trees_environment() -> None:
    items = ["split:HI_MOE_LORA_SOLO=off", "split:A=1=2", "other:EMPTY="]
    assert ab._tree_env(items) == {
        "split": {"HI_MOE_LORA_SOLO": "off", "A": "1=2"},
        "other": {"EMPTY": ""},
    }


@pytest.mark.parametrize("item", ["split", "split:", ":KEY=1", "split:KEY"])
def test_a_malformed_tree_env_item_is_refused(item: str) -> None:
    with pytest.raises(SystemExit, match="NAME:KEY=VALUE"):
        ab._tree_env([item])


def test_an_environment_for_a_tree_not_given_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        ab.main(["--tree", "a=.", "--tree-env", "b:X=1", "--cases", "o:1:16:1"])
    assert "--tree-env names trees not given: ['b']" in capsys.readouterr().err
