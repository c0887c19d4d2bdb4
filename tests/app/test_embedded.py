"""The embedded stack as a user runs it: separate control-plane and vLLM processes, real HTTP.

These tests share the session's stack (``vllm_server``) and use adapter names of their own.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hi_moe_lora.tinymodel import TinyAdapterSpec, build_adapter
from tests.conftest import VllmServer

pytestmark = pytest.mark.vllm


@pytest.fixture
def admin(vllm_server: VllmServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{vllm_server.control_plane_url}/admin/v1", timeout=60) as client:
        yield client


def _register(admin: httpx.Client, name: str, version: str, source: Path) -> httpx.Response:
    return admin.post(
        f"/adapters/{name}/versions", json={"version": version, "source": str(source)}
    )


def _complete(vllm_server: VllmServer, model: str) -> httpx.Response:
    body = {"model": model, "prompt": "def fibonacci(n):", "max_tokens": 4, "temperature": 0.0}
    return httpx.post(f"{vllm_server.control_plane_url}/v1/completions", json=body, timeout=120)


def _copy(vllm_server: VllmServer, tmp_path: Path, label: str) -> Path:
    target = tmp_path / label
    shutil.copytree(vllm_server.adapters["python-lora"][0], target)
    return target


def _registry_state(vllm_server: VllmServer, name: str) -> tuple[Any, list[str]]:
    database = vllm_server.stack.workdir / "registry.db"
    with sqlite3.connect(database) as connection:
        rows = connection.execute(
            "SELECT v.version, v.lora_int_id, v.is_active FROM adapter_versions v "
            "JOIN adapters a ON a.id = v.adapter_id WHERE a.name = ? ORDER BY v.id",
            (name,),
        ).fetchall()
        counter = connection.execute("SELECT * FROM lora_id_counter").fetchall()
    store = vllm_server.stack.workdir / "artifacts" / name
    files = sorted(str(p.relative_to(store)) for p in store.rglob("*")) if store.exists() else []
    return (rows, counter), files


def test_both_servers_are_up(vllm_server: VllmServer) -> None:
    assert httpx.get(f"{vllm_server.control_plane_url}/readyz").status_code == 200
    models = httpx.get(f"{vllm_server.url}/v1/models", headers=vllm_server.stack.vllm_headers)
    models = models.json()
    assert vllm_server.base_model in {model["id"] for model in models["data"]}


def test_bad_adapters_are_rejected_and_change_nothing(
    vllm_server: VllmServer, admin: httpx.Client, tmp_path: Path
) -> None:
    name = "e2e-bad-lora"
    assert (
        _register(admin, name, "1.0.0", vllm_server.adapters["python-lora"][0]).status_code == 201
    )
    before = _registry_state(vllm_server, name)

    missing_config = _copy(vllm_server, tmp_path, "missing-config")
    (missing_config / "adapter_config.json").unlink()
    corrupt = _copy(vllm_server, tmp_path, "corrupt")
    (corrupt / "adapter_model.safetensors").write_bytes(b"\xff" * 8 + b"{not json")
    wrong_base = _copy(vllm_server, tmp_path, "wrong-base")
    config = json.loads((wrong_base / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "/models/some-other-llama"
    (wrong_base / "adapter_config.json").write_text(json.dumps(config))
    too_high = build_adapter(
        vllm_server.fleet.model_dir,
        tmp_path / "rank-128",
        TinyAdapterSpec(rank=128, seed=3, target_modules=("q_proj",)),
    )
    cases = {
        "missing_config": (missing_config, "2.0.0"),
        "corrupt_weights": (corrupt, "2.0.1"),
        "base_model_mismatch": (wrong_base, "2.0.2"),
        "rank_too_high": (too_high, "2.0.3"),
        "version_exists": (vllm_server.adapters["python-lora"][1], "1.0.0"),
    }
    for code, (source, version) in cases.items():
        response = _register(admin, name, version, source)
        assert 400 <= response.status_code < 500, (code, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["code"] == code
        assert _registry_state(vllm_server, name) == before, code

    listed = admin.get(f"/adapters/{name}").json()
    assert [v["version"] for v in listed["versions"]] == ["1.0.0"]
    rejected = _complete(vllm_server, f"{name}@2.0.0")
    assert rejected.status_code == 404
    assert rejected.json()["error"]["code"] == "model_not_found"


def test_ids_are_never_reused_across_delete_and_restart(
    vllm_server: VllmServer, admin: httpx.Client
) -> None:
    name = "e2e-ids-lora"
    first, second = vllm_server.adapters["python-lora"]
    one = _register(admin, name, "1.0.0", first).json()["lora_int_id"]
    two = _register(admin, name, "1.1.0", second).json()["lora_int_id"]
    assert two > one
    assert admin.delete(f"/adapters/{name}/versions/1.1.0").status_code == 204

    vllm_server.stack.restart_control_plane()

    three = _register(admin, name, "1.2.0", second).json()["lora_int_id"]
    assert three > two
    served = _complete(vllm_server, f"{name}@1.2.0")
    assert served.status_code == 200, served.text
    assert served.json()["model"] == f"{name}@1.2.0"
    log = (vllm_server.stack.log_dir / "vllm.log").read_text(errors="replace")
    assert f"'{name}@1.2.0' using HiMoeLoraResolver" in log  # loaded on demand by our plugin


def test_exactly_one_version_is_active_through_promote_and_rollback(
    vllm_server: VllmServer, admin: httpx.Client
) -> None:
    name = "e2e-active-lora"
    first, second = vllm_server.adapters["python-lora"]
    _register(admin, name, "1.0.0", first)
    _register(admin, name, "1.1.0", second)

    def active() -> list[str]:
        (rows, _), _ = _registry_state(vllm_server, name)
        return [version for version, _, is_active in rows if is_active]

    assert active() == ["1.0.0"]
    assert admin.post(f"/adapters/{name}/versions/1.1.0/promote").status_code == 200
    assert active() == ["1.1.0"]
    assert _complete(vllm_server, name).json()["model"] == f"{name}@1.1.0"
    assert admin.post(f"/adapters/{name}/rollback").status_code == 200
    assert active() == ["1.0.0"]
    assert _complete(vllm_server, name).json()["model"] == f"{name}@1.0.0"


def test_vllm_arguments_of_the_stack_reach_every_replica(tmp_path: Path) -> None:
    from hi_moe_lora.app.embedded import EmbeddedStack

    stack = EmbeddedStack(
        workdir=tmp_path,
        model_dir=tmp_path / "model",
        max_loras=16,
        max_cpu_loras=64,
        vllm_replicas=2,
        vllm_extra_args=("--no-enable-prefix-caching",),
    )
    for replica in (0, 1):
        argv = stack.vllm_launch(replica).command()
        assert argv[argv.index("--max-cpu-loras") + 1] == "64"
        assert argv[argv.index("--max-loras") + 1] == "16"
        assert argv[-1] == "--no-enable-prefix-caching"
    assert "--max-cpu-loras" not in EmbeddedStack(tmp_path, tmp_path).vllm_launch().command()


def test_a_model_the_host_cannot_serve_fails_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host condition is set here (tests/app/test_host_support.py checks it against vLLM);
    the stack must fail at once, with that reason, leaving no database and no process."""
    from hi_moe_lora.app import embedded
    from hi_moe_lora.app.processes import ProcessStartError

    model_dir = tmp_path / "awq-model"
    monkeypatch.setattr(embedded, "unservable_reason", lambda model: f"{model} needs AVX-512")
    stack = embedded.EmbeddedStack(workdir=tmp_path / "stack", model_dir=model_dir)
    with pytest.raises(ProcessStartError, match="awq-model needs AVX-512"):
        stack.start()
    assert not (tmp_path / "stack").exists()
    assert stack._processes == []


def test_vllm_stops_before_the_control_plane_although_it_starts_first(tmp_path: Path) -> None:
    """``start`` launches vLLM before the control plane (vLLM's start overlaps the migration
    and the control plane's); ``stop`` still stops every vLLM first."""
    from hi_moe_lora.app.embedded import EmbeddedStack
    from hi_moe_lora.app.processes import ManagedProcess

    stopped: list[str] = []

    class Recorded(ManagedProcess):
        def stop(self, grace_s: float = 20.0) -> None:
            stopped.append(self.name)
            super().stop(grace_s)

    stack = EmbeddedStack(workdir=tmp_path, model_dir=tmp_path / "model", vllm_replicas=2)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    for name in ("vLLM", "vLLM 1", "control plane"):  # the order start() launches them in
        stack._processes.append(Recorded(name, sleeper, tmp_path / f"{name}.log").start())
    stack.stop()
    assert stopped == ["vLLM 1", "vLLM", "control plane"]


def test_stop_control_plane_stops_it_alone_and_stop_then_ends_the_rest(tmp_path: Path) -> None:
    from hi_moe_lora.app.embedded import CONTROL_PLANE_PROCESS, EmbeddedStack
    from hi_moe_lora.app.processes import ManagedProcess

    stack = EmbeddedStack(workdir=tmp_path, model_dir=tmp_path / "model")
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    processes = {
        name: ManagedProcess(name, sleeper, tmp_path / f"{name}.log").start()
        for name in ("vLLM", CONTROL_PLANE_PROCESS)
    }
    stack._processes.extend(processes.values())
    stack.stop_control_plane()
    assert [p.name for p in stack._processes] == ["vLLM"]
    assert not processes[CONTROL_PLANE_PROCESS].running()
    assert processes["vLLM"].running()
    stack.stop()
    assert stack._processes == []
    assert not processes["vLLM"].running()
