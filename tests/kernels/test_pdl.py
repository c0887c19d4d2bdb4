"""Programmatic dependent launch of the fused kernel: the modes, the compiled wait, and on a GPU
the kernel launched right after a GEMM that writes its output (eager and in a CUDA graph)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import torch

from hi_moe_lora.kernels import pdl
from hi_moe_lora.kernels.config import TileConfig
from hi_moe_lora.kernels.fused.flavours import compile_for_target
from hi_moe_lora.kernels.pdl import PdlMode, PdlSettingError, parse_mode
from hi_moe_lora.kernels.reference_loops import lora_linear_reference
from hi_moe_lora.kernels.triton_kernel import launch_fused_lora

from .lora_cases import make_problem, tolerance


@pytest.fixture
def pdl_mode() -> Iterator[pdl.PdlSwitch]:
    """The process's switch, put back as it was after the test."""
    before = pdl.SWITCH.mode
    yield pdl.SWITCH
    pdl.SWITCH.set(before)


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        (None, PdlMode.OFF),
        ("", PdlMode.OFF),
        ("off", PdlMode.OFF),
        ("0", PdlMode.OFF),
        ("launch", PdlMode.LAUNCH),
        (" Overlap ", PdlMode.OVERLAP),
        ("2", PdlMode.OVERLAP),
    ],
)
def test_the_setting_names_a_mode(value: str | None, mode: PdlMode) -> None:
    assert parse_mode(value) is mode


def test_a_setting_that_names_no_mode_is_refused() -> None:
    with pytest.raises(PdlSettingError, match="off, launch or overlap"):
        parse_mode("yes-please")


def test_the_switch_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pdl.ENV, "overlap")
    assert pdl.PdlSwitch().mode is PdlMode.OVERLAP
    monkeypatch.delenv(pdl.ENV)
    assert pdl.PdlSwitch().mode is PdlMode.OFF


def test_a_launch_on_the_cpu_is_never_dependent(pdl_mode: pdl.PdlSwitch) -> None:
    pdl_mode.set(PdlMode.OVERLAP)
    assert pdl.mode_for(torch.zeros(1)) is PdlMode.OFF


def test_the_interpreter_runs_the_kernel_with_the_switch_on(pdl_mode: pdl.PdlSwitch) -> None:
    """The switch leaves CPU launches alone (the wait is a Hopper instruction): the result is
    the reference's."""
    pdl_mode.set(PdlMode.OVERLAP)
    slots = torch.tensor([0, 1, -1, 1, 0])
    p = make_problem(5, 40, [48], [8, 16], slots)
    ref = lora_linear_reference(p.y, p.x, p.lora_a, p.lora_b, slots, 0.5)
    launch_fused_lora(p.y, p.x, p.lora_a, p.lora_b, p.work.tiles, p.work.counters, 0.5)
    assert float((p.y.double() - ref).abs().max()) <= tolerance(torch.float16, ref)


@pytest.mark.parametrize(("gdc_wait", "waits"), [(0, 0), (1, 1), (2, 1)])
def test_the_wait_is_compiled_in_where_the_mode_puts_it(
    gdc_wait: int, waits: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sm_90 code (no GPU needed): one wait instruction where a mode needs it (at the start
    for ``launch``, in the expand job for ``overlap``), none without PDL, and the launch
    attribute recorded in the compiled kernel's metadata."""
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # compile, do not interpret
    cfg = TileConfig(16, 128, 512, 16, 1, 1, 4, 1, 16)
    kernel = compile_for_target(1, cfg, True, arch=90, gdc_wait=gdc_wait)
    ptx = kernel.asm["ptx"]
    assert len(re.findall(r"griddepcontrol\.wait", ptx)) == waits
    assert kernel.metadata.launch_pdl is (gdc_wait > 0)


def test_overlap_waits_after_the_shrink_reads_x(monkeypatch: pytest.MonkeyPatch) -> None:
    """In ``overlap`` the wait sits between the shrink (its arrival, a release) and the expand
    (its wait on the pair, an acquire), so the shrink runs before the kernel before it ends."""
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # compile, do not interpret
    cfg = TileConfig(16, 128, 512, 16, 1, 1, 4, 1, 16)
    ptx = compile_for_target(1, cfg, True, arch=90, gdc_wait=2).asm["ptx"]
    release = ptx.index(".release.")
    wait = ptx.index("griddepcontrol.wait")
    acquire = ptx.index(".acquire.")
    assert release < wait < acquire


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", [PdlMode.LAUNCH, PdlMode.OVERLAP])
@pytest.mark.parametrize("m", [3, 64, 700])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_after_a_gemm_that_writes_y(
    pdl_mode: pdl.PdlSwitch, mode: PdlMode, m: int, graph: bool
) -> None:
    """``y = x @ W.T`` then the LoRA launch on the same stream, as vLLM's layers run them: the
    launch may start before the GEMM ends, and must still add onto the GEMM's ``y``. Equal to
    the plain launch bit for bit (the kernel is deterministic), and to the reference."""
    if not pdl.supports_pdl(torch.cuda.current_device()):
        pytest.skip("programmatic dependent launch needs sm_90")
    k, widths = 512, [1024, 256, 256]
    slots = torch.arange(m) % 3 - 1  # base tokens and two adapters
    p = make_problem(m, k, widths, [16, 8], slots, dtype=torch.bfloat16, device="cuda", seed=m)
    weight = (torch.randn(sum(widths), k, device="cuda") / k**0.5).to(torch.bfloat16)

    def layer() -> None:
        torch.mm(p.x, weight.t(), out=p.y)
        launch_fused_lora(p.y, p.x, p.lora_a, p.lora_b, p.work.tiles, p.work.counters, 0.5)

    def run(chosen: PdlMode) -> torch.Tensor:
        pdl_mode.set(chosen)
        p.y.zero_()
        layer()  # compiles the variant outside any capture
        if graph:
            captured = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured):
                layer()
            p.y.zero_()
            captured.replay()
        else:
            p.y.zero_()
            layer()
        torch.cuda.synchronize()
        assert int(p.work.counters.abs().sum()) == 0
        return p.y.clone()

    plain = run(PdlMode.OFF)
    dependent = run(mode)
    assert torch.equal(dependent, plain)
    base = torch.mm(p.x, weight.t())
    ref = lora_linear_reference(base, p.x, p.lora_a, p.lora_b, slots.cuda(), 0.5)
    assert float((dependent.double().cpu() - ref.cpu()).abs().max()) <= tolerance(
        torch.bfloat16, ref
    )
