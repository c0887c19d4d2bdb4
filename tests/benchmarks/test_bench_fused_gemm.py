"""bench_fused_gemm.py's prototype kernel on the CPU (Triton's interpreter) against float64."""

from __future__ import annotations

import pytest
import torch

from tests.support.scripts import load_script

bench = load_script("benchmarks/kernels/bench_fused_gemm.py")


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a GPU, the script's kernel through Triton's interpreter (its JIT flavour was
    made when the script was loaded)."""
    if not torch.cuda.is_available():
        from triton.runtime.interpreter import InterpretedFunction

        monkeypatch.setenv("TRITON_INTERPRET", "1")
        interpreted = InterpretedFunction(bench._gemm_lora_kernel)
        monkeypatch.setattr(bench, "gemm_lora_kernel", interpreted)


@pytest.mark.parametrize(("m", "k", "n"), [(3, 256, 64), (16, 128, 96), (40, 192, 64)])
@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("rows", [16, 64])
def test_the_prototype_computes_the_gemm_and_its_lora(
    m: int, k: int, n: int, lora: bool, rows: int
) -> None:
    """``x W^T`` (plus ``scale (x A^T) B^T`` with LoRA) for every row, rows past ``m`` of the
    row tile (the call's rows rounded up, or at least ``rows``) masked, over K steps of 64."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(m + k)
    x, w = torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen) / k**0.5
    a = torch.randn(bench.RANK, k, generator=gen) / k**0.5
    b = torch.randn(n, bench.RANK, generator=gen) / bench.RANK**0.5
    x, w, a, b = (t.to(device) for t in (x, w, a, b))
    y = torch.full((m, n), float("nan"), device=device)
    bench.gemm_lora(x, w, a, b, y, 0.5, (32, 64, 2, rows), lora)
    ref = x.double() @ w.double().T
    if lora:
        ref += 0.5 * (x.double() @ a.double().T) @ b.double().T
    assert float((y.double() - ref).abs().max()) < 1e-4


def test_it_needs_a_gpu_to_time() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(SystemExit):
        bench.main(["--ms", "8"])
