"""``hi-moe-lora adapters register`` with a progress bar: the CLI against a real control plane
(uvicorn) registering from a real HTTPS server (test CA) and from a local directory."""

from __future__ import annotations

import json
import math
import socket
import struct
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
from tests.support.file_servers import FileServer, LocalCA, http_server, make_ca, serve_adapter

WEIGHTS = "adapter_model.safetensors"


@pytest.fixture
def ca(tmp_path: Path) -> LocalCA:
    return make_ca(tmp_path)


@pytest.fixture
def https(ca: LocalCA) -> Iterator[FileServer]:
    with http_server(ca) as server:
        yield server


@pytest.fixture
def control_plane(tmp_path: Path, https: FileServer, ca: LocalCA) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    upgrade_to_head(url)
    settings = ControlPlaneSettings(
        database_url=url,
        artifact_dir=tmp_path / "artifacts",
        base_model=DEFAULT_BASE_MODEL,
        source_roots=[tmp_path / "local"],
        source_url_prefixes=[https.base_url + "/adapters/"],
        source_ca_bundle=ca.bundle,
        dispatch_embeddings=False,
        health_checks=False,
        warmup=False,
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir())


def test_register_from_https_shows_the_bytes_fetched(
    control_plane: str, https: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    adapter = write_adapter(tmp_path / "published" / "py")
    url = serve_adapter(https, "/adapters/py", adapter)
    code, out, err = _run(
        capsys, "adapters", "register", "py", "1.0.0", url, "--url", control_plane
    )
    assert code == 0, err
    registered = json.loads(out)
    assert registered["source_uri"] == url
    assert registered["lora_int_id"] == 1
    total = _size(adapter)
    lines = err.splitlines()  # not a terminal: one line per step
    assert len(lines) >= 2
    assert all(line.startswith("[") and " fetched " in line for line in lines)
    assert lines[0].startswith(f"[--------------------] 0/{total} fetched 0 B of ")
    assert lines[-1].startswith(f"[####################] {total}/{total} fetched ")


def test_register_from_a_local_directory_shows_the_bytes_copied(
    control_plane: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    adapter = write_adapter(tmp_path / "local" / "py")
    code, out, err = _run(
        capsys, "adapters", "register", "py", "1.0.0", str(adapter), "--url", control_plane
    )
    assert code == 0, err
    assert json.loads(out)["source_uri"] == adapter.as_uri()
    assert err.splitlines()[-1].startswith("[####################] ")


def test_errors_read_as_they_do_without_a_stream(
    control_plane: str, https: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    adapter = write_adapter(tmp_path / "published" / "nan")
    data = bytearray((adapter / WEIGHTS).read_bytes())
    start = 8 + struct.unpack("<Q", data[:8])[0]
    data[start : start + 4] = struct.pack("<f", math.nan)
    (adapter / WEIGHTS).write_bytes(bytes(data))
    url = serve_adapter(https, "/adapters/nan", adapter)
    cp = ["--url", control_plane]

    # refused after the bytes arrived: the stream's error line
    code, out, err = _run(capsys, "adapters", "register", "nan", "1.0.0", url, *cp)
    assert code == 1
    assert out == ""
    last = err.splitlines()[-1]
    assert last.startswith("error: Invalid adapter (non_finite_weights): ")

    # refused before a byte: a plain problem answer, the same message shape
    outside = https.base_url + "/private/nan"
    code, out, err = _run(capsys, "adapters", "register", "nan", "1.0.0", outside, *cp)
    assert (code, out) == (1, "")
    assert err.startswith("error: Invalid request (source_url_not_allowed): ")
    assert "/private/" not in err

    code, _, err = _run(capsys, "adapters", "show", "nan", *cp)
    assert code == 1
    assert "not_found" in err  # nothing was registered
