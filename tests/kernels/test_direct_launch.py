"""Direct launches of the fused kernel's compiled variants: the key agrees with Triton's own
specialisation (CPU), and on a GPU a direct launch gives what the JIT gives as each argument
varies."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from hi_moe_lora.kernels import direct_launch, launch_plan
from hi_moe_lora.kernels.direct_launch import (
    EQUALS_ONE,
    MULTIPLE_OF_16,
    OTHER,
    call_key,
    default_on,
    int_class,
    trailing_constexprs,
)
from hi_moe_lora.kernels.fused.flavours import compiled_kernel
from hi_moe_lora.kernels.reference_loops import lora_linear_reference
from hi_moe_lora.kernels.triton_kernel import launch_fused_lora

from .lora_cases import make_problem, tolerance

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="launches on a GPU")


@pytest.fixture(autouse=True)
def _switch_restored() -> Iterator[None]:
    was = direct_launch.SWITCH.on
    launch_plan.forget_layers()
    yield
    direct_launch.SWITCH.set(was)


def test_on_for_gpu_tested_triton_unless_the_environment_says_otherwise() -> None:
    tested = next(iter(direct_launch.GPU_TESTED))
    assert default_on(None, tested)
    assert not default_on(None, (9, 99))
    assert not default_on(None, None)
    assert default_on("1", (9, 99))
    assert not default_on(" off ", tested)
    assert default_on("", tested)
    assert default_on("auto", tested)
    assert not default_on("AUTO", (9, 99))
    with pytest.raises(ValueError, match="HI_MOE_LORA_DIRECT_LAUNCH='maybe'"):
        default_on("maybe", tested)


def test_integer_classes() -> None:
    assert [int_class(v) for v in (1, 0, 16, -32, 2, 17, 2**31 - 1)] == [
        EQUALS_ONE, MULTIPLE_OF_16, MULTIPLE_OF_16, MULTIPLE_OF_16, OTHER, OTHER, OTHER,
    ]  # fmt: skip


def test_integers_beyond_32_bits_take_the_jit() -> None:
    x = torch.zeros(4)
    assert call_key([x], [16], [3]) is not None
    assert call_key([x], [2**31], [3]) is None
    assert call_key([x], [16], [-(2**31) - 1]) is None


def _triton_specialisation() -> Callable[[Any, bool], Any]:
    native = pytest.importorskip("triton._C.libtriton").native_specialize_impl
    from triton.backends.compiler import BaseBackend

    return lambda value, specialise: native(BaseBackend, value, False, specialise, True)


def test_equal_keys_mean_equal_triton_specialisations() -> None:
    """Two arguments with the same key get the same specialisation from Triton, so a variant
    kept under a key is the one the JIT would pick for every call with that key."""
    spec = _triton_specialisation()
    ints = [*range(-40, 200), 255, 256, 4095, 4096, 14336, 2**31 - 16, 2**31 - 1]
    for specialise in (True, False):
        by_key: dict[object, set[object]] = {}
        for v in ints:
            key = call_key([], [v] if specialise else [], [] if specialise else [v])
            by_key.setdefault(key, set()).add(spec(v, specialise))
        assert all(len(specs) == 1 for specs in by_key.values()), by_key
    tensors: dict[object, set[object]] = {}
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.int32):
        base = torch.zeros(64, dtype=dtype)
        for offset in range(9):
            t = base[offset:]
            tensors.setdefault(call_key([t], [], []), set()).add(spec(t, True))
    assert all(len(specs) == 1 for specs in tensors.values()), tensors
    assert len(tensors) == 8  # each dtype, aligned and not


def test_the_kernel_takes_its_constexprs_last_in_the_plans_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the JIT function, not interpreted
    kernel = compiled_kernel()
    constexpr_names = [p.name for p in kernel.params if p.is_constexpr]
    runtime = len(kernel.params) - len(constexpr_names)
    values = {name: index for index, name in enumerate(constexpr_names)} | {"num_warps": 4}
    assert trailing_constexprs(kernel, runtime, values) == tuple(range(len(constexpr_names)))
    assert trailing_constexprs(kernel, runtime - 1, values) is None  # a runtime arg left over
    assert trailing_constexprs(kernel, runtime + 1, values) is None
    del values[constexpr_names[-1]]
    assert trailing_constexprs(kernel, runtime, values) is None


def test_a_constexpr_among_the_runtime_arguments_refuses_direct_launches() -> None:
    params = [SimpleNamespace(name=n, is_constexpr=c) for n, c in (("x", False), ("C", True))]
    params.append(SimpleNamespace(name="y", is_constexpr=False))
    assert trailing_constexprs(SimpleNamespace(params=params), 2, {"C": 1}) is None


class _Launcher:
    """Records how a direct launch reached a compiled variant: its launcher, or its runner."""

    function, packed_metadata = "function", "metadata"

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def run(self, *args: Any) -> None:
        self.calls.append(("launcher", args))

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        def runner(*args: Any, stream: Any = None) -> None:
            self.calls.append(("runner", (grid, *args)))

        return runner


@pytest.fixture
def _stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(direct_launch, "current_stream_getter", lambda: lambda device: 77)


@pytest.mark.usefixtures("_stream")
def test_without_hooks_the_launcher_is_called_as_the_runner_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    idle = SimpleNamespace(calls=[])
    monkeypatch.setattr(direct_launch, "launch_hooks", lambda: (idle, idle))
    compiled = _Launcher()
    direct_launch.launch(compiled, 12, 0, ("x", 3), (True, 64))
    assert compiled.calls == [
        ("launcher", (12, 1, 1, 77, "function", "metadata", None, None, None, "x", 3, True, 64))
    ]


@pytest.mark.usefixtures("_stream")
def test_a_registered_hook_or_an_unknown_triton_takes_the_runner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    idle, listening = SimpleNamespace(calls=[]), SimpleNamespace(calls=[print])
    for hooks in ((listening, idle), (idle, listening), (print, None), None):
        monkeypatch.setattr(direct_launch, "launch_hooks", lambda hooks=hooks: hooks)
        compiled = _Launcher()
        direct_launch.launch(compiled, 12, 0, ("x",), (True,))
        assert compiled.calls == [("runner", ((12, 1, 1), "x", True))], hooks


def test_this_tritons_hooks_are_found_and_idle() -> None:
    pytest.importorskip("triton")
    hooks = direct_launch.launch_hooks()
    assert hooks is not None
    assert not any(map(direct_launch._hook_set, hooks))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's tests run on CPU hosts")
def test_the_interpreter_never_keeps_variants() -> None:
    direct_launch.SWITCH.set(True)
    slots = torch.randint(-1, 2, (12,), generator=torch.Generator().manual_seed(1))
    p = make_problem(12, 32, [16], [8, 8], slots, seed=1)
    launch_fused_lora(p.y, p.x, p.lora_a, p.lora_b, p.work.tiles, p.work.counters, 1.0)
    layer = next(iter(launch_plan._LAYERS.values()))
    assert all(not plan.direct for plan in layer._by_config.values())


# (rows, x shifted by one element, y shifted by three, min_rank, scale, reduce_in_expand)
_CALLS = [
    (33, False, False, 0, 0.5, None),
    (35, False, False, 0, 0.5, None),  # rows are not specialised
    (47, False, False, 16, 0.25, None),  # nor min_rank or the scale
    (17, False, False, 0, 0.5, None),
    (40, True, False, 0, 0.5, None),  # x: unaligned, row stride not a multiple of 16
    (41, True, False, 0, 0.5, None),
    (40, False, True, 0, 0.5, None),  # y: unaligned, row stride not a multiple of 16
    (40, True, True, 16, 1.0, None),
    (44, True, True, 0, 1.0, None),
    (40, False, False, 0, 0.5, True),  # reductions forced: kept apart from the default
    (40, False, False, 0, 0.5, False),
    (1, False, False, 0, 0.5, None),
    (2, False, False, 0, 0.5, None),
    (64, True, False, 16, 0.5, None),
]


@needs_gpu
def test_direct_launches_give_what_the_jit_gives_as_each_argument_varies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each row runs three times: by the JIT, then twice with direct launches on (the second
    launches directly). A row whose tile configuration, alignments, strides and reductions an
    earlier row had launches directly on its first call too."""
    direct = 0
    real_launch = direct_launch.launch

    def counted(*args: Any) -> None:
        nonlocal direct
        direct += 1
        real_launch(*args)

    monkeypatch.setattr(direct_launch, "launch", counted)
    rows, k, widths, ranks = 64, 256, [192, 64], [8, 16, 16, 4]
    gen = torch.Generator().manual_seed(7)
    slots = torch.randint(-1, len(ranks), (rows,), generator=gen)
    p = make_problem(rows, k, widths, ranks, slots, dtype=torch.bfloat16, device="cuda", seed=7)
    n = sum(widths)
    x_room = torch.randn(rows, k + 1, generator=gen).to(torch.bfloat16).cuda()
    y_room = torch.randn(rows, n + 3, generator=gen).to(torch.bfloat16).cuda()
    # Row-major copies: a one-row slice of the rooms counts as contiguous with their strides
    # (257, 259), which Triton specialises apart from 256.
    x_packed = x_room[:, :k].clone(memory_format=torch.contiguous_format)
    assert x_packed[:1].stride() == (k, 1)
    seen: set[tuple[object, ...]] = set()
    shared_rows = 0
    for m, x_shift, y_shift, min_rank, scale, reduce in _CALLS:
        p.work.update(slots[:m].numpy(), ranks)
        x = x_room[:m, 1 : k + 1] if x_shift else x_packed[:m]
        y_from = 3 if y_shift else 0
        y_in = y_room[:m].clone()
        outputs = []
        shared = False
        for call, on in enumerate((False, True, True)):
            direct_launch.SWITCH.set(on)
            y_full = y_in.clone()
            y = y_full[:, y_from : y_from + n]
            if not y_shift:
                y = torch.empty(m, n, dtype=y.dtype, device=y.device).copy_(y)
            before = direct
            cfg = launch_fused_lora(
                y, x, p.lora_a, p.lora_b, p.work.tiles, p.work.counters, scale,
                min_rank=min_rank, reduce_in_expand=reduce,
            )  # fmt: skip
            kind = (cfg, x_shift, y_shift, reduce)
            if call == 0:
                shared = kind in seen
                shared_rows += shared
            expected = {0: False, 1: shared, 2: True}[call]
            assert (direct > before) == expected, (m, call)
            outputs.append(y.clone())
        seen.add(kind)
        assert torch.equal(outputs[1], outputs[0]), m
        assert torch.equal(outputs[2], outputs[0]), m
        ref = lora_linear_reference(
            y_in[:, y_from : y_from + n], x, p.lora_a, p.lora_b, slots[:m], scale
        ).cpu()
        assert (outputs[2].double().cpu() - ref).abs().max() <= tolerance(torch.bfloat16, ref)
    assert shared_rows >= 4  # the rows that differ only in what is not specialised


@needs_gpu
def test_calls_of_a_launched_class_go_straight_to_its_variant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calls of one class (one prefill bucket, or one decode count; default options) after the
    first direct launch skip the configuration and the specialisation key, and give what the
    JIT gives at their own row counts."""
    straight = 0
    real = launch_plan.DirectCall.launch

    def counted(self: Any, *args: Any) -> None:
        nonlocal straight
        straight += 1
        real(self, *args)

    monkeypatch.setattr(launch_plan.DirectCall, "launch", counted)
    rows, k, widths, ranks = 700, 256, [192, 64], [8, 16, 16, 4]
    gen = torch.Generator().manual_seed(11)
    slots = torch.randint(-1, len(ranks), (rows,), generator=gen)
    p = make_problem(rows, k, widths, ranks, slots, dtype=torch.bfloat16, device="cuda", seed=11)
    # (rows, calls through DirectCall expected of the three with direct launches on: a class's
    # first call goes through the JIT, its second launches directly and keeps the class, the
    # third goes straight; a class kept earlier, straight from the first; 41 rows take 40's
    # configuration, so its first call finds the variant, launches directly and keeps its class)
    for m, expected in ((300, 1), (420, 3), (700, 3), (40, 1), (40, 3), (41, 2)):
        p.work.update(slots[:m].numpy(), ranks)
        y_in = p.y[:m].clone()
        outputs = []
        before = straight
        for on in (False, True, True, True):
            direct_launch.SWITCH.set(on)
            y = y_in.clone()
            launch_fused_lora(y, p.x[:m], p.lora_a, p.lora_b, p.work.tiles, p.work.counters, 0.5)
            outputs.append(y)
        assert straight - before == expected, m
        assert all(torch.equal(out, outputs[0]) for out in outputs[1:]), m
        ref = lora_linear_reference(y_in, p.x[:m], p.lora_a, p.lora_b, slots[:m], 0.5).cpu()
        assert (outputs[-1].double().cpu() - ref).abs().max() <= tolerance(torch.bfloat16, ref)


@needs_gpu
def test_a_launch_hook_sees_every_launch_direct_ones_too() -> None:
    hooks = direct_launch.launch_hooks()
    if hooks is None or not hasattr(hooks[0], "add"):
        pytest.skip("this Triton keeps no chain of launch hooks")
    direct_launch.SWITCH.set(True)
    slots = torch.randint(-1, 2, (40,), generator=torch.Generator().manual_seed(5))
    p = make_problem(40, 256, [64], [16, 8], slots, dtype=torch.bfloat16, device="cuda", seed=5)
    seen: list[object] = []
    hooks[0].add(seen.append)
    try:
        for _ in range(4):  # the JIT, a direct launch keeping the class, then straight, twice
            launch_fused_lora(p.y, p.x, p.lora_a, p.lora_b, p.work.tiles, p.work.counters, 0.5)
    finally:
        hooks[0].remove(seen.append)
    assert len(seen) == 4
