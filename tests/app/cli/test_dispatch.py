"""``hi-moe-lora dispatch``, ``gaps`` and ``adapters hints`` against a real control plane."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from hi_moe_lora.app.cli import main
from hi_moe_lora.app.processes import free_port
from hi_moe_lora.control_api import ControlPlaneClient
from tests.openai.live import ServedApp, control_plane_settings, serve_control_plane
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    workdir = tmp_path_factory.mktemp("cli-dispatch")
    served = serve_control_plane(
        control_plane_settings(workdir, DEFAULT_BASE_MODEL, ["http://127.0.0.1:9"])
    )
    client = ControlPlaneClient(served.url, timeout_s=30)
    client.register("sql-lora", "1.0.0", str(write_adapter(workdir / "src")), domains=["sql"])
    yield served
    served.stop()


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_dispatch_prints_the_decision_and_its_reasons(
    plane: ServedApp, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(
        capsys, "dispatch", "why is this slow?", "--ref", "reports/q.sql", "--url", plane.url
    )
    assert code == 0
    assert out.splitlines()[0] == "sql-lora (sql-lora@1.0.0), by extension"
    assert "q.sql" in out
    code, out, _ = _run(capsys, "dispatch", "banana bread recipe", "--json", "--url", plane.url)
    decision = json.loads(out)
    assert (decision["specialist"], decision["tier"]) == (None, "fallback")


def test_hints_then_gaps(plane: ServedApp, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--url", plane.url]
    code, out, _ = _run(
        capsys, "adapters", "hints", "sql-lora", "--keyword", "dbt", "--exemplar", "x y", *url
    )
    assert (code, out.strip()) == (0, "sql-lora: 1 keywords, 1 exemplars")
    # a batch records its fallbacks as routing gaps (written off the request path)
    client = ControlPlaneClient(plane.url, timeout_s=30)
    batch = client.dispatch_batch([("sourdough starter smells of acetone, why?", [])])
    assert batch["groups"][0]["specialist"] is None
    deadline = time.monotonic() + 10
    while not client.routing_gaps()["total"] and time.monotonic() < deadline:
        time.sleep(0.1)
    code, out, _ = _run(capsys, "gaps", "list", *url)
    assert code == 0
    assert out.startswith("1 gaps")
    assert "sourdough" in out
    code, out, _ = _run(capsys, "gaps", "summary", "--json", *url)
    assert json.loads(out)["gaps"] == 1


def test_errors_exit_1(capsys: pytest.CaptureFixture[str], plane: ServedApp) -> None:
    code, _, err = _run(capsys, "dispatch", " ", "--url", plane.url)
    assert code == 1
    assert "objective" in err
    code, _, err = _run(capsys, "gaps", "list", "--url", f"http://127.0.0.1:{free_port()}")
    assert code == 1
    assert "cannot reach the control plane" in err
