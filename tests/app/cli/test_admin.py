"""``hi-moe-lora adapters``: the CLI against a real control plane served by uvicorn."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from hi_moe_lora.app.cli import main
from registry.app import create_app
from registry.db.migrate import upgrade_to_head
from registry.settings import ControlPlaneSettings
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def control_plane(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    upgrade_to_head(url)
    settings = ControlPlaneSettings(
        database_url=url,
        artifact_dir=tmp_path / "artifacts",
        base_model=DEFAULT_BASE_MODEL,
        source_roots=[tmp_path],
        dispatch_embeddings=False,  # the admin CLI's tests need no embedding model
    )
    port = _free_port()
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive(), "control plane failed to start"
        assert time.monotonic() < deadline, "control plane did not start in 60 s"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_lifecycle(
    control_plane: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = ["--url", control_plane]
    first = write_adapter(tmp_path / "v1")
    second = write_adapter(tmp_path / "v2", seed=1)

    monkeypatch.chdir(tmp_path)  # a relative source is sent as an absolute path
    code, out, _ = _run(
        capsys, "adapters", "register", "py-lora", "1.0.0", "v1", "--domain", "python", *url
    )
    assert code == 0
    registered = json.loads(out)
    assert (registered["lora_int_id"], registered["is_active"]) == (1, True)
    assert registered["source_uri"] == first.resolve().as_uri()
    code, out, _ = _run(capsys, "adapters", "register", "py-lora", "1.1.0", str(second), *url)
    assert code == 0

    code, out, _ = _run(capsys, "adapters", "list", *url)
    assert code == 0
    assert out.splitlines()[0].split() == ["NAME", "ACTIVE", "VERSIONS", "DOMAINS"]
    assert out.splitlines()[1].split() == ["py-lora", "1.0.0", "2", "python"]

    code, out, _ = _run(capsys, "adapters", "promote", "py-lora", "1.1.0", *url)
    assert (code, json.loads(out)["is_active"]) == (0, True)
    code, out, _ = _run(capsys, "adapters", "traffic", "py-lora", "1.0.0=0.1", *url)
    assert code == 0
    code, out, _ = _run(capsys, "adapters", "show", "py-lora", "--json", *url)
    shares = {v["version"]: v["traffic_share"] for v in json.loads(out)["versions"]}
    assert shares == pytest.approx({"1.0.0": 0.1, "1.1.0": 0.9})
    code, out, _ = _run(capsys, "adapters", "rollback", "py-lora", *url)
    assert (code, json.loads(out)["version"]) == (0, "1.0.0")
    code, out, _ = _run(capsys, "adapters", "resolve", "py-lora", *url)
    assert json.loads(out)["served_name"] == "py-lora@1.0.0"
    code, out, _ = _run(capsys, "adapters", "delete", "py-lora", "1.1.0", *url)
    assert (code, out.strip()) == (0, "deleted py-lora@1.1.0")
    code, out, _ = _run(capsys, "adapters", "show", "py-lora", *url)
    assert code == 0
    assert "1.1.0" not in out


def test_errors_exit_1_with_the_problem(
    control_plane: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "adapters", "show", "ghost-lora", "--url", control_plane)
    assert (code, out) == (1, "")
    assert "adapter_not_found" in err
    bad = write_adapter(tmp_path / "bad", rank=128)
    code, _, err = _run(
        capsys, "adapters", "register", "x-lora", "1.0.0", str(bad), "--url", control_plane
    )
    assert code == 1
    assert "rank_too_high" in err
    code, _, err = _run(capsys, "adapters", "traffic", "x-lora", "oops", "--url", control_plane)
    assert code == 1
    assert "VERSION=WEIGHT" in err


def test_unreachable_control_plane(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "adapters", "list", "--url", f"http://127.0.0.1:{_free_port()}")
    assert code == 1
    assert "cannot reach the control plane" in err


#: Runs the CLI, then logs as a third-party HTTP client library does on every request.
_CLI_THEN_LIBRARY_LOGS = (
    "import logging, sys; from hi_moe_lora.app.cli import main; code = main(sys.argv[1:]);"
    " logging.getLogger('httpx').info('HTTP Request: GET /x \"HTTP/1.1 200 OK\"');"
    " logging.getLogger('httpx').warning('a library warning'); sys.exit(code)"
)


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own (its logging set up as a user's shell gets it)."""
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_cli_prints_no_library_request_logs(control_plane: str, tmp_path: Path) -> None:
    source = write_adapter(tmp_path / "v1")
    url = ["--url", control_plane]
    cli = ["-m", "hi_moe_lora.app.cli"]
    registered = _cli(*cli, "adapters", "register", "quiet-lora", "1.0.0", str(source), *url)
    listed = _cli(*cli, "adapters", "list", *url)
    assert (registered.returncode, listed.returncode) == (0, 0), registered.stderr
    assert "quiet-lora" in listed.stdout
    for run in (registered, listed):
        assert "HTTP Request:" not in run.stderr
        assert " INFO http" not in run.stderr

    quiet = _cli("-c", _CLI_THEN_LIBRARY_LOGS, "adapters", "list", *url)
    assert quiet.returncode == 0
    assert "HTTP Request:" not in quiet.stderr
    assert "a library warning" in quiet.stderr  # warnings still show
    debug = _cli("-c", _CLI_THEN_LIBRARY_LOGS, "--log-level", "DEBUG", "adapters", "list", *url)
    assert "HTTP Request:" in debug.stderr  # asked for everything
