"""The fused kernel's layout checks: weights once per layer, activations on every call."""

from __future__ import annotations

import pytest
import torch

from hi_moe_lora.kernels.layout import FusedLoRAShapeError, check_activations, check_weights


def test_weights_of_one_layout_pass() -> None:
    a = [torch.zeros(3, 16, 40), torch.zeros(3, 16, 40)]
    b = [torch.zeros(3, 24, 16), torch.zeros(3, 8, 16)]
    check_weights(a, b)
    check_weights(a, [torch.zeros(3, 24, 8), torch.zeros(3, 8, 8)])  # B stored narrower


@pytest.mark.parametrize(
    ("a", "b", "problem"),
    [
        ([torch.zeros(3, 16, 40)] * 4, [torch.zeros(3, 8, 16)] * 4, "1..3 slices"),
        ([torch.zeros(3, 16, 40)], [torch.zeros(3, 8, 32)], "rank at most"),
        ([torch.zeros(3, 16, 40)], [torch.zeros(2, 8, 16)], "does not match"),
        ([torch.zeros(3, 16, 40).transpose(1, 2)], [torch.zeros(3, 8, 16)], "contiguous"),
        ([torch.zeros(3, 16, 40)], [torch.zeros(3, 8, 16, dtype=torch.float16)], "dtype"),
    ],
)
def test_bad_weights_are_named(a: list[torch.Tensor], b: list[torch.Tensor], problem: str) -> None:
    with pytest.raises(FusedLoRAShapeError, match=problem):
        check_weights(a, b)


def test_activations() -> None:
    x, y = torch.zeros(5, 40), torch.zeros(5, 32)
    check_activations(x, y, 40, 32)
    with pytest.raises(FusedLoRAShapeError, match="slices end at 33 > 32"):
        check_activations(x, y, 40, 33)
    with pytest.raises(FusedLoRAShapeError, match="x has 40"):
        check_activations(x, y, 41, 32)
    with pytest.raises(FusedLoRAShapeError, match="x has 4 rows, y has 5"):
        check_activations(x[:4], y, 40, 32)
