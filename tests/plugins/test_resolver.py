"""The resolver plugin against a real control plane served over HTTP (uvicorn in a thread).

Failure modes the real control plane cannot produce on demand (HTTP 500, garbage, a hang) come
from a scripted stdlib HTTP server; the resolver must decline (``None``), log why, and return
within its timeout.
"""

from __future__ import annotations

import asyncio
import http.server
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from vllm.lora.request import LoRARequest
from vllm.lora.resolver import LoRAResolverRegistry

import plugins.resolver as resolver_module
from hi_moe_lora.adapters.checksum import adapter_sha256
from hi_moe_lora.app.processes import free_port
from hi_moe_lora.cache import ChecksumCache
from plugins import dora
from plugins.metrics import RESOLVER_DURATION, PluginMetrics
from plugins.resolver import (
    RESOLVER_NAME,
    HiMoeLoraResolver,
    make_lora_request,
    register,
)
from plugins.settings import ENV_REGISTRY_URL, ENV_RESOLVER_TIMEOUT_S, PluginSettings
from tests.conftest import VllmServer
from tests.openai.live import ServedApp, control_plane_settings, serve_control_plane
from tests.openai.live import register as register_version
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter

BASE = DEFAULT_BASE_MODEL


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    workdir = tmp_path_factory.mktemp("registry")
    settings = control_plane_settings(workdir, BASE, ["http://127.0.0.1:9"])
    served = serve_control_plane(settings)
    yield served
    served.stop()


@pytest.fixture
def adapters_dir(tmp_path: Path) -> Path:
    return tmp_path / "sources"


def _resolver(url: str, timeout_s: float = 5.0, **kwargs: object) -> HiMoeLoraResolver:
    settings = PluginSettings(registry_url=url, resolver_timeout_s=timeout_s, **kwargs)  # type: ignore[arg-type]
    return HiMoeLoraResolver(settings)


def _resolve(resolver: HiMoeLoraResolver, lora_name: str, base: str = BASE) -> LoRARequest | None:
    return asyncio.run(resolver.resolve_lora(base, lora_name))


def test_resolves_bare_and_pinned_names(registry: ServedApp, adapters_dir: Path) -> None:
    info_1 = register_version(
        registry.url, "res-a", "1.0.0", write_adapter(adapters_dir / "a1", seed=1)
    )
    info_2 = register_version(
        registry.url, "res-a", "1.1.0", write_adapter(adapters_dir / "a2", seed=2)
    )
    resolver = _resolver(registry.url)

    bare = _resolve(resolver, "res-a")
    assert isinstance(bare, LoRARequest)
    assert bare.lora_name == "res-a"
    # the first version is the active one until a promotion
    assert bare.lora_path == str(Path(info_1["local_path"]).resolve())
    assert bare.lora_int_id == info_1["lora_int_id"]
    assert Path(bare.lora_path).is_absolute()

    pinned = _resolve(resolver, "res-a@1.1.0")
    assert pinned is not None
    assert pinned.lora_name == "res-a@1.1.0"
    assert pinned.lora_path == str(Path(info_2["local_path"]).resolve())
    assert pinned.lora_int_id == info_2["lora_int_id"] != info_1["lora_int_id"]


def test_bare_name_follows_promotion(registry: ServedApp, adapters_dir: Path) -> None:
    register_version(registry.url, "res-p", "1.0.0", write_adapter(adapters_dir / "p1", seed=3))
    newer = register_version(
        registry.url, "res-p", "2.0.0", write_adapter(adapters_dir / "p2", seed=4), promote=True
    )
    resolved = _resolve(_resolver(registry.url), "res-p")
    assert resolved is not None
    assert resolved.lora_path == str(Path(newer["local_path"]).resolve())


def test_unknown_names_are_declined(registry: ServedApp, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="plugins.resolver")
    resolver = _resolver(registry.url)
    assert _resolve(resolver, "no-such-adapter") is None
    assert _resolve(resolver, "no-such-adapter@1.0.0") is None
    assert _resolve(resolver, "Not A Name!") is None
    assert any(
        r.levelno == logging.INFO and "not in the hi-moe-lora registry" in r.getMessage()
        for r in caplog.records
    )
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_checksum_mismatch_is_declined_with_an_error(
    registry: ServedApp, adapters_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    info = register_version(
        registry.url, "res-t", "1.0.0", write_adapter(adapters_dir / "t1", seed=5)
    )
    resolver = _resolver(registry.url)
    assert _resolve(resolver, "res-t") is not None  # verified (and remembered) once
    weights = Path(info["local_path"]) / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    caplog.set_level(logging.INFO, logger="plugins.resolver")
    assert _resolve(resolver, "res-t") is None
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors
    assert "checksum" in errors[0].getMessage()


def test_a_file_swapped_after_registration_is_declined_and_counted(
    registry: ServedApp, adapters_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    info = register_version(
        registry.url, "res-w", "1.0.0", write_adapter(adapters_dir / "w1", seed=11)
    )
    other = write_adapter(adapters_dir / "w2", seed=12)  # valid, same shapes: another adapter
    collector = CollectorRegistry()
    resolver = HiMoeLoraResolver(
        PluginSettings(registry_url=registry.url), metrics=PluginMetrics(collector)
    )
    assert _resolve(resolver, "res-w") is not None
    weights = Path(info["local_path"]) / "adapter_model.safetensors"
    os.replace(other / "adapter_model.safetensors", weights)  # swapped in place, atomically
    caplog.set_level(logging.INFO, logger="plugins.resolver")
    assert _resolve(resolver, "res-w") is None
    assert _resolve(resolver, "res-w@1.0.0") is None
    assert any(r.levelno == logging.ERROR and "checksum" in r.getMessage() for r in caplog.records)

    def count(outcome: str) -> float | None:
        return collector.get_sample_value(f"{RESOLVER_DURATION}_count", {"outcome": outcome})

    assert (count("resolved"), count("checksum_mismatch"), count("declined")) == (1, 2, 0)


def test_missing_directory_is_declined(
    registry: ServedApp, adapters_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    info = register_version(
        registry.url, "res-m", "1.0.0", write_adapter(adapters_dir / "m1", seed=6)
    )
    local = Path(info["local_path"])
    local.rename(local.with_name("moved-away"))
    caplog.set_level(logging.INFO, logger="plugins.resolver")
    assert _resolve(_resolver(registry.url), "res-m") is None
    assert any("does not exist" in r.getMessage() for r in caplog.records)


def test_other_base_model_is_declined(
    registry: ServedApp, adapters_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    register_version(registry.url, "res-b", "1.0.0", write_adapter(adapters_dir / "b1", seed=7))
    resolver = _resolver(registry.url)
    caplog.set_level(logging.INFO, logger="plugins.resolver")
    assert _resolve(resolver, "res-b", base="/models/another-llama") is None
    assert any("trained for base model" in r.getMessage() for r in caplog.records)
    # full identity: the same last path component elsewhere (or as a hub id) is another model
    assert _resolve(resolver, "res-b", base="org/tiny-llama") is None
    assert _resolve(resolver, "res-b", base="/srv/tiny-llama") is None
    assert _resolve(resolver, "res-b", base=f"{BASE}/") is not None
    assert _resolve(resolver, "res-b", base=f"{BASE}/../tiny-llama") is not None


def test_checksum_is_not_recomputed_for_unchanged_files(
    registry: ServedApp, adapters_dir: Path
) -> None:
    source = write_adapter(adapters_dir / "c1", seed=8)
    register_version(registry.url, "res-c", "1.0.0", source)
    checksums = ChecksumCache()
    settings = PluginSettings(registry_url=registry.url)
    resolver = HiMoeLoraResolver(settings, checksums=checksums)
    assert _resolve(resolver, "res-c") is not None
    assert len(checksums) == 1
    assert _resolve(resolver, "res-c") is not None
    assert len(checksums) == 1


def test_dora_is_resolved_only_where_this_process_serves_dora(
    registry: ServedApp, adapters_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # plugins.dora serves DoRA on the CPU platform; on CUDA (no DoRA epilogue yet) it is off
    register_version(
        registry.url, "res-d", "1.0.0", write_adapter(adapters_dir / "d1", use_dora=True)
    )
    register_version(registry.url, "res-l", "1.0.0", write_adapter(adapters_dir / "l1"))
    for served in (False, True):
        monkeypatch.setattr(dora, "is_installed", lambda served=served: served)
        for kernels in ("vllm", "ours"):
            resolved = _resolve(_resolver(registry.url, kernels=kernels), "res-d")
            assert (resolved is not None) == served
            assert _resolve(_resolver(registry.url, kernels=kernels), "res-l") is not None


# ------------------------------------------------------------------ registry failures


class _Scripted(http.server.BaseHTTPRequestHandler):
    status = 500
    body = b'{"detail": "boom"}'
    delay_s = 0.0

    def do_GET(self) -> None:
        time.sleep(self.delay_s)
        try:
            self.send_response(self.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(self.body)))
            self.end_headers()
            self.wfile.write(self.body)
        except OSError:
            pass

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[tuple[str, type[_Scripted]]]:
    handler = type("Handler", (_Scripted,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    # a short poll: shutdown() waits up to one poll interval (0.5 s by default)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (500, b'{"detail": "boom"}', "HTTP 500: boom"),
        (200, b"not json", "not JSON"),
        (200, b'{"name": "x"}', "lacks a usable field"),
        (200, b"[1, 2]", "not a JSON object"),
    ],
)
def test_bad_registry_answers_are_declined_with_a_warning(
    scripted: tuple[str, type[_Scripted]],
    caplog: pytest.LogCaptureFixture,
    status: int,
    body: bytes,
    expected: str,
) -> None:
    url, handler = scripted
    handler.status, handler.body = status, body
    caplog.set_level(logging.INFO, logger="plugins.resolver")
    assert _resolve(_resolver(url), "anything") is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(expected in message for message in warnings), warnings


def test_slow_registry_times_out(
    scripted: tuple[str, type[_Scripted]], caplog: pytest.LogCaptureFixture
) -> None:
    url, handler = scripted
    handler.status, handler.delay_s = 200, 3.0
    caplog.set_level(logging.INFO, logger="plugins.resolver")
    started = time.monotonic()
    assert _resolve(_resolver(url, timeout_s=0.3), "anything") is None
    assert time.monotonic() - started < 2.0
    assert any(r.levelno == logging.WARNING for r in caplog.records)


def test_unreachable_registry_is_declined(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="plugins.resolver")
    assert _resolve(_resolver(f"http://127.0.0.1:{free_port()}"), "anything") is None
    assert any(r.levelno == logging.WARNING and "lookup" in r.getMessage() for r in caplog.records)


def test_make_lora_request_uses_this_vllms_path_field(tmp_path: Path) -> None:
    request = make_lora_request("x@1.0.0", 7, str(tmp_path))
    assert (request.lora_name, request.lora_int_id, request.path) == ("x@1.0.0", 7, str(tmp_path))


def test_checksum_of_registered_copy_matches(registry: ServedApp, adapters_dir: Path) -> None:
    source = write_adapter(adapters_dir / "s1", seed=9)
    info = register_version(registry.url, "res-s", "1.0.0", source)
    assert info["sha256"] == adapter_sha256(Path(info["local_path"])) == adapter_sha256(source)


# ------------------------------------------------------------------ register()


@pytest.fixture
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(resolver_module, "_disabled_logged", False)
    previous = LoRAResolverRegistry.resolvers.pop(RESOLVER_NAME, None)
    yield
    LoRAResolverRegistry.resolvers.pop(RESOLVER_NAME, None)
    if previous is not None:
        LoRAResolverRegistry.resolvers[RESOLVER_NAME] = previous


@pytest.mark.usefixtures("clean_registry")
def test_register_without_registry_url_does_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(ENV_REGISTRY_URL, raising=False)
    caplog.set_level(logging.INFO, logger="plugins.resolver")
    # register() stops our loggers propagating (they forward to vLLM's log): listen on ours
    ours = logging.getLogger("plugins.resolver")
    ours.addHandler(caplog.handler)
    try:
        register()
        register()
    finally:
        ours.removeHandler(caplog.handler)
    assert RESOLVER_NAME not in LoRAResolverRegistry.get_supported_resolvers()
    # one record, seen by the handler once or twice (also through propagation)
    off = {id(r): r for r in caplog.records if "resolver off" in r.getMessage()}
    assert [record.levelno for record in off.values()] == [logging.INFO]


@pytest.mark.usefixtures("clean_registry")
def test_register_is_idempotent(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ENV_REGISTRY_URL, "http://127.0.0.1:9")
    caplog.set_level(logging.INFO)
    register()
    first = LoRAResolverRegistry.get_resolver(RESOLVER_NAME)
    register()
    assert isinstance(first, HiMoeLoraResolver)
    assert LoRAResolverRegistry.get_resolver(RESOLVER_NAME) is first
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.usefixtures("clean_registry")
def test_register_with_bad_settings_logs_and_returns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ENV_REGISTRY_URL, "http://127.0.0.1:9")
    monkeypatch.setenv(ENV_RESOLVER_TIMEOUT_S, "never")
    caplog.set_level(logging.INFO, logger="plugins.resolver")
    register()
    assert RESOLVER_NAME not in LoRAResolverRegistry.get_supported_resolvers()
    assert any(r.levelno == logging.ERROR for r in caplog.records)


# ------------------------------------------------------------------ inside real vLLM


@pytest.mark.vllm
def test_vllm_loads_a_never_loaded_version_through_the_resolver(vllm_server: VllmServer) -> None:
    name = f"res-vllm-{time.monotonic_ns()}"
    register_version(
        vllm_server.control_plane_url, name, "1.0.0", vllm_server.adapters["python-lora"][0]
    )
    register_version(
        vllm_server.control_plane_url, name, "1.1.0", vllm_server.adapters["python-lora"][1]
    )

    headers = vllm_server.stack.vllm_headers  # vLLM's API key

    def loaded() -> set[str]:
        answer = httpx.get(f"{vllm_server.url}/v1/models", headers=headers, timeout=30)
        return {card["id"] for card in answer.json()["data"]}

    def complete(model: str) -> httpx.Response:
        return httpx.post(
            f"{vllm_server.url}/v1/completions",
            json={"model": model, "prompt": "def f(x):", "max_tokens": 4, "temperature": 0.0},
            headers=headers,
            timeout=120,
        )

    assert f"{name}@1.1.0" not in loaded()
    response = complete(f"{name}@1.1.0")  # never loaded: vLLM asks our resolver
    assert response.status_code == 200, response.text
    assert response.json()["model"] == f"{name}@1.1.0"
    assert f"{name}@1.1.0" in loaded()

    missing = complete(f"{name}@9.9.9")  # our resolver declines: vLLM's own 404
    assert missing.status_code == 404


def test_the_resolver_sends_its_token_to_a_closed_control_plane(
    tmp_path_factory: pytest.TempPathFactory, adapters_dir: Path
) -> None:
    from pydantic import SecretStr

    from hi_moe_lora.control_api import ControlPlaneClient

    admin, token = "hml_resolver-test-admin-0123456789abcdef", "hml_resolver-test-0123456789abcdef"
    settings = control_plane_settings(
        tmp_path_factory.mktemp("closed"),
        BASE,
        ["http://127.0.0.1:9"],
        admin_token=SecretStr(admin),
        resolver_token=SecretStr(token),
    )
    served = serve_control_plane(settings)
    try:
        ControlPlaneClient(served.url, timeout_s=60, token=admin).register(
            "tok-a", "1.0.0", str(write_adapter(adapters_dir / "t1", seed=1))
        )
        refused = _resolver(served.url)  # no token: the control plane answers 401
        assert _resolve(refused, "tok-a") is None
        from_env = PluginSettings.from_env(
            {ENV_REGISTRY_URL: served.url, "HI_MOE_LORA_RESOLVER_TOKEN": token}
        )
        assert token not in repr(from_env)
        request = _resolve(HiMoeLoraResolver(from_env), "tok-a")
        assert request is not None
        assert request.lora_name == "tok-a"
    finally:
        served.stop()
