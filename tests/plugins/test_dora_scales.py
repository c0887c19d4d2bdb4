"""``plugins.dora_scales``: DoRA's scale against PEFT's own ``DoraLinearLayer`` on random
tensors, for one layer, a packed layer and several layers at once."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from plugins.dora_scales import dora_scales


def _peft_norm_scale(
    weight: torch.Tensor, a: torch.Tensor, b: torch.Tensor, m: torch.Tensor, scaling: float
) -> torch.Tensor:
    from peft.tuners.lora.dora import DoraLinearLayer

    layer = DoraLinearLayer(fan_in_fan_out=False)
    norm = layer.get_weight_norm(weight, (b @ a).detach(), scaling)
    return m / norm


def _from_weight(
    weight: torch.Tensor,
) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """What the served layer offers: squared row norms and its own product ``x W^T``."""
    return weight.double().pow(2).sum(dim=1), lambda x: x @ weight.T


def test_the_scale_equals_peft_for_one_and_for_packed_layers() -> None:
    torch.manual_seed(0)
    weight = torch.randn(24, 16)
    a = [torch.randn(4, 16), torch.randn(4, 16)]
    b = [torch.randn(10, 4), torch.randn(14, 4)]
    m = [torch.rand(10) + 0.5, torch.rand(14) + 0.5]
    scaling = 2.0
    # vLLM folds the scaling into B before it reaches the layers
    folded = [scaling * b_i for b_i in b]
    norms, apply_base = _from_weight(weight)
    packed = dora_scales((10, 14), [norms], [a], [folded], [m], [apply_base])
    expected = torch.cat(
        [
            _peft_norm_scale(weight[:10], a[0], b[0], m[0], scaling),
            _peft_norm_scale(weight[10:], a[1], b[1], m[1], scaling),
        ]
    )
    torch.testing.assert_close(packed[0], expected, rtol=1e-5, atol=1e-6)
    norms, apply_base = _from_weight(weight[:10])
    one = dora_scales((10,), [norms], [a[:1]], [folded[:1]], [m[:1]], [apply_base])
    torch.testing.assert_close(one[0], expected[:10], rtol=1e-5, atol=1e-6)


def test_layers_of_one_shape_are_scaled_together_each_by_its_own_weight() -> None:
    torch.manual_seed(1)
    weights = [torch.randn(12, 8) for _ in range(3)]
    a = [[torch.randn(4, 8)] for _ in weights]
    b = [[torch.randn(12, 4)] for _ in weights]
    m = [[torch.rand(12) + 0.5] for _ in weights]
    served = [_from_weight(weight) for weight in weights]
    together = dora_scales(
        (12,), [n for n, _ in served], a, b, m, [product for _, product in served]
    )
    for layer, weight in enumerate(weights):
        alone = _peft_norm_scale(weight, a[layer][0], b[layer][0], m[layer][0], 1.0)
        torch.testing.assert_close(together[layer], alone, rtol=1e-5, atol=1e-6)


def test_a_slice_without_magnitude_scales_by_one_and_shapes_are_checked() -> None:
    norms, apply_base = _from_weight(torch.randn(6, 4))
    zeros_a, zeros_b = torch.zeros(1, 4), torch.zeros(2, 1)
    scale = dora_scales(
        (2, 4),
        [norms],
        [[zeros_a, torch.ones(1, 4)]],
        [[zeros_b, torch.ones(4, 1)]],
        [[None, torch.ones(4)]],
        [apply_base],
    )
    assert torch.equal(scale[0, :2], torch.ones(2))
    with pytest.raises(ValueError, match="do not match"):
        dora_scales((2, 2), [norms], [[zeros_a] * 2], [[zeros_b] * 2], [[None] * 2], [apply_base])
    with pytest.raises(ValueError, match="magnitude"):
        dora_scales(
            (6,), [norms], [[zeros_a]], [[torch.zeros(6, 1)]], [[torch.ones(5)]], [apply_base]
        )
    with pytest.raises(ValueError, match="differ"):
        dora_scales(
            (6,),
            [norms, norms],
            [[zeros_a]] * 2,
            [[torch.zeros(6, 1)]] * 2,
            [[torch.ones(6)], [None]],
            [apply_base] * 2,
        )
