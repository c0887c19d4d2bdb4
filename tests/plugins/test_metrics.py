"""Our Prometheus families inside vLLM: resolver time (API server), adapter load time (worker).

Unit tests use a registry of their own; the multiprocess tests run writer and reader in child
processes (prometheus_client picks its mode at import, and this process must stay in the default
one); the ``vllm``-marked tests read the real server's ``/metrics``.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hi_moe_lora.adapters.checksum import adapter_sha256
from plugins import load_timing
from plugins.metrics import (
    ADAPTER_LOAD,
    ADAPTER_READ,
    LOAD_OUTCOMES,
    RESOLVE_OUTCOMES,
    RESOLVER_DURATION,
    PluginMetrics,
    plugin_metrics,
)
from plugins.resolver import HiMoeLoraResolver
from plugins.settings import PluginSettings
from tests.conftest import REPO_ROOT, VllmServer
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str, family: str) -> Samples:
    """``{(sample name, sorted labels): value}`` of one family in an exposition text."""
    found: Samples = {}
    for metric in text_string_to_metric_families(text):
        if metric.name == family:
            for sample in metric.samples:
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def count(found: Samples, family: str, outcome: str) -> float:
    return found.get((f"{family}_count", (("outcome", outcome),)), 0.0)


def total(found: Samples, family: str, outcome: str) -> float:
    return found.get((f"{family}_sum", (("outcome", outcome),)), 0.0)


# ------------------------------------------------------------------ the families


def test_families_appear_on_first_use_with_every_outcome_at_zero() -> None:
    registry = CollectorRegistry()
    metrics = PluginMetrics(registry)
    assert not samples(generate_latest(registry).decode(), RESOLVER_DURATION)

    metrics.observe_resolve("resolved", 0.25)
    text = generate_latest(registry).decode()
    found = samples(text, RESOLVER_DURATION)
    assert count(found, RESOLVER_DURATION, "resolved") == 1
    assert total(found, RESOLVER_DURATION, "resolved") == pytest.approx(0.25)
    for outcome in RESOLVE_OUTCOMES:
        assert (f"{RESOLVER_DURATION}_count", (("outcome", outcome),)) in found
    # the worker's families are built only where the worker records them
    assert not samples(text, ADAPTER_LOAD)
    assert not samples(text, ADAPTER_READ)


def test_load_and_read_families() -> None:
    registry = CollectorRegistry()
    metrics = PluginMetrics(registry)
    metrics.observe_load("loaded", 0.5)
    metrics.observe_load("error", 0.1)
    metrics.observe_read("loaded", 0.2)
    text = generate_latest(registry).decode()
    load, read = samples(text, ADAPTER_LOAD), samples(text, ADAPTER_READ)
    assert count(load, ADAPTER_LOAD, "loaded") == count(load, ADAPTER_LOAD, "error") == 1
    assert total(load, ADAPTER_LOAD, "loaded") == pytest.approx(0.5)
    assert count(read, ADAPTER_READ, "loaded") == 1
    assert {labels for name, labels in read if name.endswith("_count")} == {
        (("outcome", outcome),) for outcome in LOAD_OUTCOMES
    }
    # le buckets are cumulative: 0.5 s is in the 0.5 bucket, not in 0.25
    buckets = {
        dict(labels)["le"]: value
        for (name, labels), value in load.items()
        if "le" in dict(labels) and dict(labels)["outcome"] == "loaded"
    }
    assert (buckets["0.25"], buckets["0.5"], buckets["+Inf"]) == (0, 1, 1)


def test_late_kernel_compiles_are_counted() -> None:
    from plugins.metrics import KERNEL_LATE_COMPILES

    registry = CollectorRegistry()
    metrics = PluginMetrics(registry)
    assert registry.get_sample_value(KERNEL_LATE_COMPILES) is None  # (built on first use)
    metrics.count_late_compile()
    metrics.count_late_compile()
    assert registry.get_sample_value(KERNEL_LATE_COMPILES) == 2


def test_build_all_shows_every_family_at_zero_and_counts_on_after() -> None:
    """What a scrape shows before any event (the deploy tests read the alerts' names here)."""
    from plugins.metrics import ARTIFACT_DOWNLOADS, KERNEL_LATE_COMPILES

    registry = CollectorRegistry()
    metrics = PluginMetrics(registry)
    metrics.build_all()
    metrics.build_all()  # (idempotent)
    names = {family.name for family in registry.collect()}
    assert len(names) == 8
    assert registry.get_sample_value(KERNEL_LATE_COMPILES) == 0
    mismatch = {"outcome": "checksum_mismatch"}
    assert registry.get_sample_value(ARTIFACT_DOWNLOADS, mismatch) == 0
    assert registry.get_sample_value(f"{RESOLVER_DURATION}_count", mismatch) == 0
    metrics.count_late_compile()
    assert registry.get_sample_value(KERNEL_LATE_COMPILES) == 1


def test_a_family_that_cannot_be_built_is_logged_once_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    Counter(RESOLVER_DURATION, "someone else's metric of that name", registry=registry)
    metrics = PluginMetrics(registry)
    caplog.set_level(logging.INFO, logger="plugins.metrics")
    for _ in range(3):
        metrics.observe_resolve("resolved", 0.1)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert RESOLVER_DURATION in warnings[0].getMessage()
    metrics.observe_load("loaded", 0.1)  # the other families still work
    assert count(samples(generate_latest(registry).decode(), ADAPTER_LOAD), ADAPTER_LOAD, "loaded")


def test_a_failing_observation_is_logged_once_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = PluginMetrics(CollectorRegistry())
    caplog.set_level(logging.INFO, logger="plugins.metrics")
    for _ in range(3):
        metrics.observe_resolve("no-such-outcome", 0.1)  # type: ignore[arg-type]
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_the_process_families_live_in_the_global_registry() -> None:
    from prometheus_client import REGISTRY

    assert plugin_metrics() is plugin_metrics()
    before = REGISTRY.get_sample_value(f"{ADAPTER_READ}_count", {"outcome": "error"}) or 0.0
    plugin_metrics().observe_read("error", 0.01)
    after = REGISTRY.get_sample_value(f"{ADAPTER_READ}_count", {"outcome": "error"})
    assert after == before + 1


# ------------------------------------------------------------------ resolver outcomes


class _Registry(http.server.BaseHTTPRequestHandler):
    """A control plane's resolve endpoint: name -> (status, JSON body)."""

    answers: ClassVar[dict[str, tuple[int, Any]]] = {}

    def do_GET(self) -> None:
        name = self.path.rsplit("/", 1)[-1]
        status, body = self.answers.get(name, (404, {"detail": f"{name} is unknown"}))
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def fake_registry() -> Iterator[tuple[str, dict[str, tuple[int, Any]]]]:
    answers: dict[str, tuple[int, Any]] = {}
    handler = type("Handler", (_Registry,), {"answers": answers})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", answers
    server.shutdown()
    server.server_close()


def _answer(name: str, path: Path, sha256: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "version": "1.0.0",
        "served_name": f"{name}@1.0.0",
        "lora_int_id": 3,
        "local_path": str(path),
        "sha256": sha256 if sha256 is not None else adapter_sha256(path),
        "rank": 8,
        "alpha": 16.0,
        "variant": "lora",
        "base_model": DEFAULT_BASE_MODEL,
    }


def test_each_resolve_is_timed_by_outcome(
    fake_registry: tuple[str, dict[str, tuple[int, Any]]], tmp_path: Path
) -> None:
    url, answers = fake_registry
    adapter = write_adapter(tmp_path / "good")
    answers["good"] = (200, _answer("good", adapter))
    answers["tampered"] = (200, _answer("tampered", adapter, sha256="0" * 64))
    answers["broken"] = (500, {"detail": "boom"})
    registry = CollectorRegistry()
    resolver = HiMoeLoraResolver(
        PluginSettings(registry_url=url, resolver_timeout_s=5.0), metrics=PluginMetrics(registry)
    )

    def resolve(name: str) -> object:
        return asyncio.run(resolver.resolve_lora(DEFAULT_BASE_MODEL, name))

    started = time.perf_counter()
    assert resolve("good") is not None
    assert resolve("good") is not None
    assert resolve("unknown") is None
    assert resolve("tampered") is None
    assert resolve("broken") is None
    assert asyncio.run(resolver.resolve_lora("/models/another-llama", "good")) is None
    elapsed = time.perf_counter() - started

    found = samples(generate_latest(registry).decode(), RESOLVER_DURATION)
    counts = {outcome: count(found, RESOLVER_DURATION, outcome) for outcome in RESOLVE_OUTCOMES}
    assert counts == {
        "resolved": 2,
        "not_found": 1,
        "declined": 1,
        "checksum_mismatch": 1,
        "error": 1,
    }
    timed = sum(total(found, RESOLVER_DURATION, outcome) for outcome in RESOLVE_OUTCOMES)
    assert 0 < timed <= elapsed


def test_an_unexpected_exception_is_timed_as_an_error(
    fake_registry: tuple[str, dict[str, tuple[int, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _answers = fake_registry
    registry = CollectorRegistry()
    resolver = HiMoeLoraResolver(PluginSettings(registry_url=url), metrics=PluginMetrics(registry))

    def explode(*args: object) -> object:
        raise RuntimeError("bug")

    monkeypatch.setattr(resolver, "_resolve_blocking", explode)
    assert asyncio.run(resolver.resolve_lora(DEFAULT_BASE_MODEL, "x")) is None
    found = samples(generate_latest(registry).decode(), RESOLVER_DURATION)
    assert count(found, RESOLVER_DURATION, "error") == 1


# ------------------------------------------------------------------ timing vLLM's worker loads


class _Loaded:
    def __init__(self, adapter_id: int) -> None:
        self.id = adapter_id


def _fake_worker_manager(read_s: float = 0.02) -> ModuleType:
    """Classes shaped like vLLM's ``vllm.lora.worker_manager`` (only what the wrapper sees)."""

    class WorkerLoRAManager:
        def __init__(self) -> None:
            self.held: set[int] = set()

        def _load_adapter(self, request: int) -> _Loaded:
            time.sleep(read_s)
            if request < 0:
                raise FileNotFoundError(request)
            return _Loaded(request)

        def add_adapter(self, request: int) -> bool:
            if request in self.held:
                return False
            self.held.add(self._load_adapter(request).id)
            return True

    class LRUCacheWorkerLoRAManager(WorkerLoRAManager):
        def add_adapter(self, request: int) -> bool:
            time.sleep(0.01)  # activation into a device slot
            return super().add_adapter(request)  # calls the parent's (also wrapped) method

    module = ModuleType("fake_worker_manager")
    module.WorkerLoRAManager = WorkerLoRAManager  # type: ignore[attr-defined]
    module.LRUCacheWorkerLoRAManager = LRUCacheWorkerLoRAManager  # type: ignore[attr-defined]
    return module


def test_cold_loads_are_timed_once_warm_calls_pass_through() -> None:
    module = _fake_worker_manager()
    registry = CollectorRegistry()
    assert load_timing.patch(module, PluginMetrics(registry)) == 3
    assert load_timing.patch(module, PluginMetrics(CollectorRegistry())) == 3  # idempotent
    manager = module.LRUCacheWorkerLoRAManager()

    assert manager.add_adapter(1) is True
    for _ in range(5):  # vLLM calls add_adapter for every active adapter at every step
        assert manager.add_adapter(1) is False
    with pytest.raises(FileNotFoundError):  # re-raised unchanged
        manager.add_adapter(-1)

    text = generate_latest(registry).decode()
    load, read = samples(text, ADAPTER_LOAD), samples(text, ADAPTER_READ)
    assert count(load, ADAPTER_LOAD, "loaded") == 1  # the nested parent call not counted again
    assert count(load, ADAPTER_LOAD, "error") == 1
    assert count(read, ADAPTER_READ, "loaded") == count(read, ADAPTER_READ, "error") == 1
    # the load includes the read and the activation
    assert total(load, ADAPTER_LOAD, "loaded") >= total(read, ADAPTER_READ, "loaded") + 0.01
    assert total(read, ADAPTER_READ, "loaded") >= 0.02

    load_timing.unpatch(module)
    assert not hasattr(module.WorkerLoRAManager.__dict__["_load_adapter"], load_timing.WRAPPED)
    assert not hasattr(module.LRUCacheWorkerLoRAManager.add_adapter, load_timing.WRAPPED)


def test_a_vllm_without_the_methods_is_left_alone(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="plugins.load_timing")
    assert load_timing.patch(ModuleType("empty"), PluginMetrics(CollectorRegistry())) == 0
    assert any(r.levelno == logging.WARNING for r in caplog.records)


def test_this_vllm_has_the_methods_we_time() -> None:
    import vllm.lora.worker_manager as worker_manager

    was_wrapped = hasattr(worker_manager.WorkerLoRAManager.add_adapter, load_timing.WRAPPED)
    assert load_timing.patch(worker_manager, PluginMetrics(CollectorRegistry())) == 3
    if not was_wrapped:
        load_timing.unpatch(worker_manager)


_FAKE_MODULE = """
class WorkerLoRAManager:
    def add_adapter(self, request):
        return True
"""


@pytest.fixture
def fake_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The name of a not yet imported module on ``sys.path``."""
    name = f"hi_moe_lora_fake_worker_manager_{time.monotonic_ns()}"
    (tmp_path / f"{name}.py").write_text(_FAKE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    load_timing._remove_hooks(name)


def _hooks(name: str) -> list[object]:
    return [f for f in sys.meta_path if getattr(f, "name", None) == name]


def test_after_import_runs_once_the_module_is_executed(fake_module: str) -> None:
    import importlib
    import inspect

    seen: list[ModuleType] = []
    load_timing.after_import(fake_module, seen.append)
    load_timing.after_import(fake_module, seen.append)  # one hook per name
    assert len(_hooks(fake_module)) == 1
    assert fake_module not in sys.modules  # nothing imported up front
    assert not seen

    module = importlib.import_module(fake_module)
    assert seen == [module]
    assert hasattr(module, "WorkerLoRAManager")  # executed before ``then`` ran
    assert not _hooks(fake_module)  # one shot
    assert "class WorkerLoRAManager" in inspect.getsource(module)  # the real loader still serves

    load_timing.after_import(fake_module, seen.append)  # loaded already: at once
    assert seen == [module, module]


def test_a_failing_callback_does_not_fail_the_import(
    fake_module: str, caplog: pytest.LogCaptureFixture
) -> None:
    import importlib

    def fail(module: ModuleType) -> None:
        raise RuntimeError("bug")

    caplog.set_level(logging.INFO, logger="plugins.load_timing")
    load_timing.after_import(fake_module, fail)
    assert importlib.import_module(fake_module).WorkerLoRAManager
    assert any(r.levelno == logging.WARNING for r in caplog.records)


# ------------------------------------------------------------------ multiprocess collection

_WRITER = """
from plugins.metrics import plugin_metrics
plugin_metrics().observe_load("loaded", 0.125)
plugin_metrics().observe_read("loaded", 0.0625)
"""

_READER = """
from prometheus_client import generate_latest
from vllm.v1.metrics.prometheus import get_prometheus_registry
print(generate_latest(get_prometheus_registry()).decode())
"""


def test_a_workers_families_reach_vllms_metrics_through_the_multiprocess_dir(
    tmp_path: Path,
) -> None:
    """What happens with ``PROMETHEUS_MULTIPROC_DIR`` set for every vLLM process: a worker (the
    writer) records a load; the API server (the reader, vLLM's own registry function) shows it."""
    env = {**_child_env(), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}

    def run(code: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    run(_WRITER)
    run(_WRITER)  # a second process (pid) adds up
    text = run(_READER)
    load, read = samples(text, ADAPTER_LOAD), samples(text, ADAPTER_READ)
    assert count(load, ADAPTER_LOAD, "loaded") == 2
    assert total(load, ADAPTER_LOAD, "loaded") == pytest.approx(0.25)
    assert count(read, ADAPTER_READ, "loaded") == 2


def _child_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}


# ------------------------------------------------------------------ inside real vLLM


def _metrics(server: VllmServer) -> str:
    response = httpx.get(f"{server.url}/metrics", timeout=30)
    response.raise_for_status()
    return response.text


def _cold_request(
    server: VllmServer, register_demo: Callable[..., dict[str, Any]], name: str
) -> tuple[str, str]:
    """Register ``name@1.0.0``, ask vLLM for it (never loaded: resolver + worker load); the
    ``/metrics`` texts before and after."""
    before = _metrics(server)
    register_demo(name, "1.0.0", kind="math-lora")
    response = httpx.post(
        f"{server.url}/v1/completions",
        json={"model": f"{name}@1.0.0", "prompt": "1 + 1 =", "max_tokens": 1},
        headers=server.stack.vllm_headers,
        timeout=120,
    )
    assert response.status_code == 200, response.text
    return before, _metrics(server)


@pytest.mark.vllm
def test_vllms_metrics_show_the_resolver_time(
    vllm_server: VllmServer,
    register_demo: Callable[..., dict[str, Any]],
    fresh_name: Callable[[str], str],
) -> None:
    before, after = _cold_request(vllm_server, register_demo, fresh_name("metrics-resolver"))

    def resolved(text: str) -> float:
        return count(samples(text, RESOLVER_DURATION), RESOLVER_DURATION, "resolved")

    assert resolved(after) >= resolved(before) + 1
    assert total(samples(after, RESOLVER_DURATION), RESOLVER_DURATION, "resolved") > 0


@pytest.mark.vllm
def test_vllms_metrics_show_the_workers_load_time(
    vllm_server: VllmServer,
    register_demo: Callable[..., dict[str, Any]],
    fresh_name: Callable[[str], str],
) -> None:
    if vllm_server.stack.vllm_launch().metrics_dir is None:
        pytest.skip("the embedded stack starts vLLM without a metrics dir (multiprocess mode)")
    before, after = _cold_request(vllm_server, register_demo, fresh_name("metrics-load"))

    def loaded(text: str, family: str) -> float:
        return count(samples(text, family), family, "loaded")

    assert loaded(after, ADAPTER_LOAD) >= loaded(before, ADAPTER_LOAD) + 1
    assert loaded(after, ADAPTER_READ) >= loaded(before, ADAPTER_READ) + 1
