from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from hi_moe_lora.app.processes import ManagedProcess, ProcessStartError, free_port, log_tail


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_http_server_becomes_ready_and_stops_with_its_group(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "hello.txt").write_text("hi")
    process = ManagedProcess(
        "http.server",
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        tmp_path / "logs" / "server.log",
        cwd=tmp_path,
    )
    with process:
        process.wait_http_ok(f"http://127.0.0.1:{port}/hello.txt", timeout_s=30)
        assert process.running()
    assert not process.running()
    assert "GET /hello.txt" in log_tail(tmp_path / "logs" / "server.log")


def test_a_process_that_exits_fails_fast_with_its_log(tmp_path: Path) -> None:
    script = "import sys; print('bad flag --nope'); sys.exit(3)"
    process = ManagedProcess("broken", [sys.executable, "-c", script], tmp_path / "broken.log")
    started = time.monotonic()
    with process, pytest.raises(ProcessStartError, match="bad flag --nope"):
        process.wait_http_ok(f"http://127.0.0.1:{free_port()}/", timeout_s=60)
    assert time.monotonic() - started < 30


def test_a_process_that_never_answers_times_out(tmp_path: Path) -> None:
    process = ManagedProcess(
        "sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "s.log"
    )
    with process, pytest.raises(ProcessStartError, match="not ready"):
        process.wait_http_ok(f"http://127.0.0.1:{free_port()}/", timeout_s=1.5)
    assert not process.running()


def test_stop_kills_a_process_that_ignores_sigterm(tmp_path: Path) -> None:
    script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        " print('up', flush=True); time.sleep(60)"
    )
    process = ManagedProcess("stubborn", [sys.executable, "-c", script], tmp_path / "x.log")
    process.start()
    deadline = time.monotonic() + 10
    while "up" not in log_tail(tmp_path / "x.log") and time.monotonic() < deadline:
        time.sleep(0.1)
    process.stop(grace_s=1.0)
    assert not process.running()


def test_log_tail_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert log_tail(tmp_path / "missing.log") == ""
