"""A layer's launch plan: made once per layer, reused on its later calls, checked per call."""

from __future__ import annotations

import inspect

import pytest
import torch

from hi_moe_lora.kernels import launch_plan, ops
from hi_moe_lora.kernels.config import TileConfig
from hi_moe_lora.kernels.launch_plan import layer_launch
from hi_moe_lora.kernels.layout import FusedLoRAShapeError
from hi_moe_lora.kernels.reference_loops import lora_linear_reference

from .lora_cases import Problem, make_problem, tolerance


@pytest.fixture(autouse=True)
def _fresh_plans() -> None:
    launch_plan.forget_layers()


def _problem(m: int = 20, seed: int = 3, device: str = "cpu") -> Problem:
    slots = torch.randint(-1, 3, (m,), generator=torch.Generator().manual_seed(seed))
    return make_problem(m, 40, [32, 16], [8, 16, 16], slots, seed=seed, device=device)


def _plan(
    p: Problem, x: torch.Tensor | None = None, y: torch.Tensor | None = None
) -> launch_plan.LayerLaunch:
    x = p.x if x is None else x
    y = p.y if y is None else y
    return layer_launch(y, x, p.lora_a, p.lora_b, p.work.counters, 0, True, None, None)


def _op_args(p: Problem, scale: float) -> tuple[object, ...]:
    return (
        p.y, p.x, p.lora_a, p.lora_b, p.work.tiles[16], p.work.tiles[64], p.slot_rank,
        p.work.counters, torch.tensor([False]), scale, 0, True,
    )  # fmt: skip


def test_a_layer_gets_one_plan_for_all_its_calls() -> None:
    p = _problem()
    first = _plan(p)
    assert _plan(p, p.x[:7], p.y[:7]) is first  # another token count: the same layer
    assert first.identity[0] is p.lora_a[0]  # held: no other tensor can take its identity
    other = _problem(seed=4)
    assert _plan(other) is not first


def test_the_op_reuses_the_plan_through_the_dispatcher(device: str) -> None:
    """The op's arguments come back from torch's dispatcher as the caller's tensor objects, so
    a layer's second call finds its plan (else every call would rebuild one)."""
    p = _problem(device=device)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, p.token_slots, 0.5).cpu()
    y_in = p.y.clone()
    for _ in range(2):
        p.y.copy_(y_in)
        ops.lora_linear(*_op_args(p, 0.5))
        assert len(launch_plan._LAYERS) == 1
        assert (p.y.double().cpu() - ref).abs().max() <= tolerance(p.y.dtype, ref)


def test_activations_are_checked_on_every_call() -> None:
    p = _problem()
    _plan(p)
    with pytest.raises(FusedLoRAShapeError, match="A takes 40 inputs, x has 39"):
        _plan(p, p.x[:, :39])
    with pytest.raises(FusedLoRAShapeError, match="x has 20 rows, y has 19"):
        layer_launch(p.y[:19], p.x, p.lora_a, p.lora_b, p.work.counters, 0, True, None, None)
    with pytest.raises(FusedLoRAShapeError, match="slices end at 49 > 48"):
        layer_launch(p.y, p.x, p.lora_a, p.lora_b, p.work.counters, 1, True, None, None)
    with pytest.raises(FusedLoRAShapeError, match="2-D"):
        _plan(p, p.x[None])


def test_bad_weights_make_no_plan() -> None:
    p = _problem()
    with pytest.raises(FusedLoRAShapeError, match="slices with A and B"):
        layer_launch(p.y, p.x, p.lora_a, p.lora_b[:1], p.work.counters, 0, True, None, None)
    assert not launch_plan._LAYERS


def test_oldest_plans_go_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch_plan, "MAX_LAYERS", 2)
    problems = [_problem(seed=s) for s in (1, 2, 3)]
    first, second, third = (_plan(p) for p in problems)
    assert list(launch_plan._LAYERS.values()) == [second, third]
    assert _plan(problems[0]) is not first  # made again


def test_per_config_parameters_are_checked_once_and_kept() -> None:
    p = _problem()
    plan = _plan(p)
    cfg = TileConfig(16, 16, 16, 16, 1, 1, 4, 1, 16)
    shared = plan.for_config(cfg)
    assert plan.for_config(cfg) is shared
    assert shared.k_split == 3  # K = 40 in blocks of 16
    with pytest.raises(FusedLoRAShapeError, match="padded rank 16 < stacked rank 32"):
        _plan(make_problem(4, 40, [16], [32], torch.zeros(4, dtype=torch.int64))).for_config(cfg)
    with pytest.raises(FusedLoRAShapeError, match="multiple"):
        plan.for_config(TileConfig(16, 16, 16, 16, 1, 1, 4, 1, 40))


def test_calls_share_a_class_by_configuration_dtype_stride_and_alignment() -> None:
    p = _problem(m=600)
    plan = _plan(p)
    x, y = p.x, p.y

    def cls(rows: int, x_from: int = 0) -> tuple[object, ...]:
        shifted = torch.empty(rows, x.shape[1] + x_from, dtype=x.dtype)[:, x_from:]
        return plan.call_class(shifted if x_from else x[:rows], y[:rows], rows)

    assert cls(300) == cls(420) == cls(1024)  # one prefill bucket
    assert cls(300) != cls(1025)
    assert cls(200) != cls(201)  # decode sizes: a configuration per count
    assert cls(300) != cls(300, x_from=1)  # x unaligned, another row stride
    assert cls(300)[1:3] == (x.dtype, y.dtype)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's tests run on CPU hosts")
def test_a_class_launched_directly_skips_the_configuration_on_later_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The launcher stands in for the compiled variant's (the interpreter runs the same
    arguments); what is checked is which calls go straight to it and that their grid, scratch
    and arguments give the reference result. (A GPU host's suite runs without the interpreter's
    ``TRITON_INTERPRET``, and ``test_direct_launch.py`` checks the real launches there.)"""
    from hi_moe_lora.kernels import direct_launch
    from hi_moe_lora.kernels.fused.flavours import interpreted_kernel
    from hi_moe_lora.kernels.fused.kernel import fused_lora_kernel

    direct: list[int] = []
    names: list[str] = []

    def interpreted(
        compiled: object,
        grid: int,
        device: int,
        args: tuple[object, ...],
        values: tuple[object, ...],
    ) -> None:
        direct.append(grid)
        interpreted_kernel()[(grid,)](*args, **dict(zip(names, values, strict=True)))

    monkeypatch.setattr(direct_launch, "launch", interpreted)
    monkeypatch.setattr(direct_launch.SWITCH, "on", True)
    p = _problem(m=20)
    plan = _plan(p)
    y_in = p.y.clone()
    plan.launch(p.y, p.x, p.work.tiles, 0.5, 0, 20)  # the interpreter keeps no variant
    assert not plan._direct_calls
    cfg = choose_config_for(plan, 20)
    config = plan.for_config(cfg)
    tiles = p.work.tiles[cfg.block_m]
    args = plan.arguments(p.y, p.x, tiles, p.y, p.y, 0, 1, 0.5)
    names += list(inspect.signature(fused_lora_kernel).parameters)[len(args) :]
    values = tuple(config.constexprs[name] for name in names)
    room = (tiles.numel() - launch_plan.HEADER_SIZE) // launch_plan.record_size(cfg.block_m)
    plan._keep_direct_call(p.x, p.y, 20, config, tiles, room, 8, (None, values))
    ref = lora_linear_reference(y_in, p.x, p.lora_a, p.lora_b, p.token_slots, 0.5)
    p.y.copy_(y_in)
    assert plan.launch(p.y, p.x, p.work.tiles, 0.5, 0, 20) == cfg
    assert len(direct) == 1
    assert (p.y.double() - ref).abs().max() <= tolerance(p.y.dtype, ref)
    p.y.copy_(y_in)
    plan.launch(p.y, p.x, p.work.tiles, 0.5, 0, 20, reductions=(True, None))  # not the defaults
    plan.launch(p.y[:19], p.x[:19], p.work.tiles, 0.5, 0, 19)  # another class
    other_tiles = {size: t.clone() for size, t in p.work.tiles.items()}
    plan.launch(p.y, p.x, other_tiles, 0.5, 0, 20)  # another work list
    direct_launch.SWITCH.set(False)
    plan.launch(p.y, p.x, p.work.tiles, 0.5, 0, 20)  # direct launches off
    assert len(direct) == 1


def choose_config_for(plan: launch_plan.LayerLaunch, m: int) -> TileConfig:
    from hi_moe_lora.kernels.config import choose_config

    a0 = plan.a[0]
    return choose_config(m, plan.k, plan.n_total, a0.shape[1], 4, a0.shape[0])
