"""vLLM plugin: install hi-moe-lora's Punica wrapper (fused multi-LoRA kernels) on CUDA.

Entry point ``hi_moe_lora_kernels = "plugins.punica:register"`` (group
``vllm.general_plugins``). vLLM resolves its Punica wrapper through
``current_platform.get_punica_wrapper()`` when a worker loads the model; ``register`` points that
at :class:`plugins.punica_wrapper.HiMoePunicaWrapperGPU`.

Setting: ``HI_MOE_LORA_KERNELS=ours`` (default), ``vllm`` (leave vLLM's kernels, to compare) or
``reference`` (the dense LoRA path in float64, ``ReferencePunicaWrapperGPU``: slow, for
correctness probes). With a wrapper of ours installed, the LoRA config's hash also
names it (:func:`cache_key_tag`), so vLLM's compile cache never hands a graph compiled around one
set of kernels to another.
On the CPU platform it installs :class:`plugins.punica_cpu.IsolatedPunicaWrapperCPU` instead
(vLLM's CPU wrapper with a fix: vLLM 0.32.0 computed base-model tokens of a mixed batch with the
last slot's adapter), for every choice but ``vllm``, and with it DoRA support
(:mod:`plugins.dora`, a PyTorch scale after each LoRA layer); other platforms keep vLLM's
wrapper. On CUDA with our kernels (``ours``), DoRA support is installed too, its scales applied
in the fused kernel's epilogue, unless vLLM's dual-stream LoRA (``VLLM_LORA_ENABLE_DUAL_STREAM``)
is on: that path gives the kernel a zeroed output instead of the base one. With our CUDA
wrapper, our kernels' variants are compiled on a pool of threads before vLLM captures its CUDA
graphs (:mod:`plugins.kernel_warmup`, ``HI_MOE_LORA_COMPILE_THREADS``).
Registration is idempotent, imports only
``vllm.platforms`` (already loaded by vLLM when plugins load), and never breaks vLLM's start:
any problem is logged and vLLM's wrapper stays. The heavy import of our wrapper (torch, triton)
happens in the worker when vLLM asks for the class; if it fails there, vLLM's wrapper is used.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plugins.logs import route_to_vllm_log
from plugins.method_patch import unwrap_method, wrap_method
from plugins.settings import ENV_DORA, ENV_KERNELS, PluginSettings, PluginSettingsError

logger = logging.getLogger(__name__)

WRAPPER_MODULE = "plugins.punica_wrapper"
WRAPPER_QUALNAME = f"{WRAPPER_MODULE}.HiMoePunicaWrapperGPU"
REFERENCE_QUALNAME = f"{WRAPPER_MODULE}.ReferencePunicaWrapperGPU"
#: The wrapper each choice installs on CUDA (``vllm``: none).
WRAPPERS = {"ours": WRAPPER_QUALNAME, "reference": REFERENCE_QUALNAME}
#: The wrapper installed on the CPU platform (any choice but ``vllm``).
CPU_WRAPPER_MODULE = "plugins.punica_cpu"
CPU_WRAPPER_QUALNAME = f"{CPU_WRAPPER_MODULE}.IsolatedPunicaWrapperCPU"
_MARK = "_hi_moe_lora_original_punica"
_HASH_MARK = "_hi_moe_lora_original_compute_hash"
_LOCK = threading.Lock()


def _make_resolver(original: str, qualname: str) -> Any:
    module = qualname.rpartition(".")[0]

    def get_punica_wrapper(cls: type) -> str:
        try:
            importlib.import_module(module)
        except Exception:
            logger.exception("hi-moe-lora kernels unavailable; using vLLM's %s", original)
            return original
        return qualname

    return classmethod(get_punica_wrapper)


def install(platform: Any, qualname: str = WRAPPER_QUALNAME) -> bool:
    """Point ``platform``'s Punica wrapper at ``qualname`` (ours by default) if it is a CUDA
    platform, or at :data:`CPU_WRAPPER_QUALNAME` if it is the CPU platform; True if installed."""
    if _is_cpu(platform):
        qualname = CPU_WRAPPER_QUALNAME
    elif not platform.is_cuda():
        logger.debug("hi-moe-lora kernels: not a CUDA or CPU platform, vLLM's wrapper stays")
        return False
    platform_cls: Any = platform if isinstance(platform, type) else type(platform)
    with _LOCK:
        if _MARK in platform_cls.__dict__:
            return True
        original = str(platform_cls.get_punica_wrapper())
        # Keep the class's own attribute (None when inherited) to restore it exactly.
        own = platform_cls.__dict__.get("get_punica_wrapper")
        platform_cls.get_punica_wrapper = _make_resolver(original, qualname)
        setattr(platform_cls, _MARK, (original, own))
    logger.info("hi-moe-lora kernels installed (%s replaces %s)", qualname, original)
    return True


def _is_cpu(platform: Any) -> bool:
    is_cpu = getattr(platform, "is_cpu", None)
    return bool(is_cpu()) if callable(is_cpu) else False


def cache_key_tag(qualname: str = WRAPPER_QUALNAME) -> str:
    """What our kernels add to the LoRA config's hash: the wrapper's name and source digest.

    vLLM keys its torch.compile cache (the AOT artifacts included) by config hashes and vLLM
    environment variables only. The wrapper's ``add_lora_linear`` is traced into the compiled
    graph, so without this a graph compiled around vLLM's kernels (``HI_MOE_LORA_KERNELS=vllm``,
    or an older wrapper) would be loaded for ours, or the other way round, with no error.
    """
    module = qualname.rpartition(".")[0].rpartition(".")[2]  # plugins.punica_wrapper → …
    source = Path(__file__).with_name(f"{module}.py").read_bytes()
    tag = f"{qualname}:{hashlib.sha256(source).hexdigest()[:16]}"
    from plugins import fused_gemm

    choice = PluginSettings.from_env_or_defaults().fused_gemm
    if qualname == WRAPPER_QUALNAME and fused_gemm.enabled(choice):  # (layers trace another op)
        hook = Path(__file__).with_name("fused_gemm.py").read_bytes()
        tag += f"+fused-gemm:{hashlib.sha256(hook).hexdigest()[:16]}"
    return tag


def tag_compile_cache_key(qualname: str = WRAPPER_QUALNAME) -> bool:
    """Mix :func:`cache_key_tag` into ``LoRAConfig.compute_hash`` (idempotent); True if done."""
    from vllm.config.lora import LoRAConfig

    tag = cache_key_tag(qualname)

    def tagged(original: Callable[..., Any]) -> Callable[..., Any]:
        def compute_hash(self: Any) -> str:
            untagged = original(self)
            return hashlib.sha256(f"{untagged}|{tag}".encode()).hexdigest()

        return compute_hash

    wrap_method(LoRAConfig, "compute_hash", _HASH_MARK, tagged)
    return True


def untag_compile_cache_key() -> None:
    """Restore vLLM's own ``LoRAConfig.compute_hash`` (tests, switching back)."""
    from vllm.config.lora import LoRAConfig

    unwrap_method(LoRAConfig, "compute_hash", _HASH_MARK)


def uninstall(platform: Any) -> None:
    """Restore the platform's own Punica wrapper (tests, switching back)."""
    platform_cls: Any = platform if isinstance(platform, type) else type(platform)
    with _LOCK:
        saved = platform_cls.__dict__.get(_MARK)
        if saved is None:
            return
        _original, own = saved
        if own is None:
            delattr(platform_cls, "get_punica_wrapper")
        else:
            platform_cls.get_punica_wrapper = own
        delattr(platform_cls, _MARK)


def _install_dora(fused: bool) -> None:
    """DoRA adapters (:mod:`plugins.dora`; ``fused``: applied by our kernel); a failure leaves
    vLLM's refusal of DoRA in place."""
    try:
        if fused:
            import vllm.envs as envs

            if getattr(envs, "VLLM_LORA_ENABLE_DUAL_STREAM", False):
                logger.warning(
                    "hi-moe-lora DoRA support not installed: VLLM_LORA_ENABLE_DUAL_STREAM hands "
                    "the LoRA kernel a zeroed output, and DoRA scales the base output too"
                )
                return
        from plugins import dora

        dora.install(fused=fused)
    except Exception:
        logger.exception("hi-moe-lora DoRA support not installed; vLLM refuses DoRA adapters")


def _install_fused_gemm(choice: str) -> None:
    """LoRA layers' base GEMM through our wrapper (:mod:`plugins.fused_gemm`) when the setting
    resolves on; a failure keeps vLLM's base GEMM."""
    try:
        from plugins import fused_gemm

        if fused_gemm.enabled(choice):
            fused_gemm.install()
    except Exception:
        logger.exception("hi-moe-lora fused GEMM not installed; vLLM's base GEMM stays")


def _install_kernel_warmup(threads: int) -> None:
    """Our kernels' variants compiled on ``threads`` threads before vLLM's capture
    (:mod:`plugins.kernel_warmup`; after DoRA, whose scale tables change the variants); a
    failure leaves the compiles to the capture."""
    try:
        from plugins import kernel_warmup

        kernel_warmup.install(threads)
    except Exception:
        logger.exception("hi-moe-lora kernel warm-up not installed; vLLM's capture compiles")


def register() -> None:
    """vLLM ``general_plugins`` entry point."""
    route_to_vllm_log()
    try:
        settings = PluginSettings.from_env()
    except PluginSettingsError as exc:
        logger.warning("%s; keeping vLLM's kernels", exc)
        return
    choice = settings.kernels
    if choice == "vllm":
        logger.info("%s=vllm: keeping vLLM's Punica kernels", ENV_KERNELS)
        return
    try:
        from vllm.platforms import current_platform

        qualname = CPU_WRAPPER_QUALNAME if _is_cpu(current_platform) else WRAPPERS[choice]
        installed = install(current_platform, qualname)
    except Exception:
        logger.exception("hi-moe-lora kernels not installed; vLLM's wrapper stays")
        return
    if not installed:
        return
    if not settings.dora:
        logger.info("%s=off: vLLM refuses DoRA adapters", ENV_DORA)
    elif qualname in (CPU_WRAPPER_QUALNAME, WRAPPER_QUALNAME, REFERENCE_QUALNAME):
        _install_dora(fused=qualname != CPU_WRAPPER_QUALNAME)
    if qualname == WRAPPER_QUALNAME:
        _install_fused_gemm(settings.fused_gemm)
        _install_kernel_warmup(settings.compile_thread_count)
    try:
        tag_compile_cache_key(qualname)
    except Exception:
        logger.exception(
            "hi-moe-lora could not tag vLLM's compile cache key: a graph cached with vLLM's "
            "kernels may be reused; set VLLM_DISABLE_COMPILE_CACHE=1 when switching kernels"
        )
