"""The kernels plugin: installs our wrapper on CUDA platforms only, idempotent, switchable."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from plugins import punica
from plugins.settings import ENV_KERNELS


class _CudaPlatform:
    """A platform class shaped like vLLM's (``is_cuda`` + classmethod ``get_punica_wrapper``)."""

    @classmethod
    def get_punica_wrapper(cls) -> str:
        return "vllm.lora.punica_wrapper.punica_gpu.PunicaWrapperGPU"

    def is_cuda(self) -> bool:
        return True


@pytest.fixture
def cuda_platform() -> Iterator[_CudaPlatform]:
    platform_cls = type("CudaPlatform", (_CudaPlatform,), {})
    yield platform_cls()
    punica.uninstall(platform_cls)
    punica.untag_compile_cache_key()


def _lora_config_hash() -> str:
    from vllm.config.lora import LoRAConfig

    return str(LoRAConfig(max_lora_rank=16, max_loras=4).compute_hash())


def test_install_points_vllm_at_our_wrapper_once(cuda_platform: _CudaPlatform) -> None:
    assert punica.install(cuda_platform)
    assert cuda_platform.get_punica_wrapper() == punica.WRAPPER_QUALNAME
    assert punica.install(cuda_platform)  # idempotent
    assert cuda_platform.get_punica_wrapper() == punica.WRAPPER_QUALNAME
    punica.uninstall(type(cuda_platform))
    assert cuda_platform.get_punica_wrapper().endswith("PunicaWrapperGPU")
    assert cuda_platform.get_punica_wrapper() != punica.WRAPPER_QUALNAME


def test_wrapper_import_failure_falls_back_to_vllm(
    cuda_platform: _CudaPlatform,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    punica.install(cuda_platform, "plugins.does_not_exist.Wrapper")
    with caplog.at_level(logging.ERROR, logger="plugins.punica"):
        assert cuda_platform.get_punica_wrapper().startswith("vllm.")
    assert "unavailable" in caplog.text


def test_register_installs_the_isolated_wrapper_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.platforms import current_platform

    assert current_platform.is_cpu()
    before = current_platform.get_punica_wrapper()
    monkeypatch.delenv(ENV_KERNELS, raising=False)
    try:
        punica.register()
        punica.register()  # idempotent
        assert current_platform.get_punica_wrapper() == punica.CPU_WRAPPER_QUALNAME
        assert before.startswith("vllm.")
    finally:
        punica.uninstall(current_platform)
        punica.untag_compile_cache_key()
    assert current_platform.get_punica_wrapper() == before


def test_register_keeps_vllms_cpu_wrapper_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.platforms import current_platform

    before = current_platform.get_punica_wrapper()
    monkeypatch.setenv(ENV_KERNELS, "vllm")
    punica.register()
    assert current_platform.get_punica_wrapper() == before


@pytest.mark.parametrize(
    ("value", "wrapper"),
    [
        ("vllm", None),
        ("bogus", None),
        ("ours", punica.WRAPPER_QUALNAME),
        ("reference", punica.REFERENCE_QUALNAME),
    ],
)
def test_register_respects_switch(
    value: str,
    wrapper: str | None,
    monkeypatch: pytest.MonkeyPatch,
    cuda_platform: _CudaPlatform,
) -> None:
    import vllm.platforms

    monkeypatch.setenv(ENV_KERNELS, value)
    monkeypatch.setattr(vllm.platforms, "_current_platform", cuda_platform, raising=False)
    vllms_hash = _lora_config_hash()
    punica.register()
    installed = cuda_platform.get_punica_wrapper()
    assert installed == wrapper if wrapper else installed.startswith("vllm.")
    # The compile cache key changes with the kernels, and only then.
    assert (_lora_config_hash() != vllms_hash) is (wrapper is not None)


def test_each_wrapper_has_its_own_compile_cache_key(cuda_platform: _CudaPlatform) -> None:
    """A graph compiled around the float64 reference must never be served as ours."""
    keys = set()
    for qualname in (punica.WRAPPER_QUALNAME, punica.REFERENCE_QUALNAME):
        punica.tag_compile_cache_key(qualname)
        keys.add(_lora_config_hash())
        punica.untag_compile_cache_key()
    assert len(keys) == 2
    assert _lora_config_hash() not in keys


def test_compile_cache_key_names_our_wrapper(cuda_platform: _CudaPlatform) -> None:
    """vLLM keys compiled graphs by config hashes: ours and vLLM's kernels must not share one."""
    vllms_hash = _lora_config_hash()
    assert punica.tag_compile_cache_key()
    tagged = _lora_config_hash()
    assert tagged != vllms_hash
    assert punica.tag_compile_cache_key()  # idempotent: tagged once, not twice
    assert _lora_config_hash() == tagged
    assert punica.WRAPPER_QUALNAME in punica.cache_key_tag()
    punica.untag_compile_cache_key()
    assert _lora_config_hash() == vllms_hash


def test_the_fused_gemm_switch_has_its_own_compile_cache_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the fused GEMM on, the layers trace another op: a graph compiled with it off must not
    be reused, nor the other way round."""
    monkeypatch.setenv("HI_MOE_LORA_FUSED_GEMM", "off")
    off = punica.cache_key_tag()
    monkeypatch.setenv("HI_MOE_LORA_FUSED_GEMM", "on")
    on = punica.cache_key_tag()
    assert on != off
    assert on.startswith(off)
    assert "+fused-gemm:" in on
    assert "+fused-gemm" not in punica.cache_key_tag(punica.REFERENCE_QUALNAME)


def test_uninstall_restores_a_method_defined_on_the_class_itself() -> None:
    class OwnPlatform:
        @classmethod
        def get_punica_wrapper(cls) -> str:
            return "own.Wrapper"

        def is_cuda(self) -> bool:
            return True

    assert punica.install(OwnPlatform())
    assert OwnPlatform.get_punica_wrapper() == punica.WRAPPER_QUALNAME
    punica.uninstall(OwnPlatform)
    assert OwnPlatform.get_punica_wrapper() == "own.Wrapper"
