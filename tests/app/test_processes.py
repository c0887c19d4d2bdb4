from __future__ import annotations

import os
import signal
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


#: Starts a child in its (inherited) process group, prints the child's pid, then exits or waits.
_PARENT = """
import subprocess, sys, time
child = [sys.executable, "-c", sys.argv[2]]
print("child", subprocess.Popen(child).pid, flush=True)
if sys.argv[1] == "wait":
    time.sleep(60)
"""
_CHILD = "import time; time.sleep(60)"
_STUBBORN_CHILD = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('ignoring SIGTERM', flush=True); time.sleep(60)"
)


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an orphan's reaper may be slow)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def _start_family(tmp_path: Path, mode: str, child: str) -> tuple[ManagedProcess, int]:
    log = tmp_path / f"{mode}.log"
    process = ManagedProcess("family", [sys.executable, "-c", _PARENT, mode, child], log)
    process.start()
    deadline = time.monotonic() + 20
    while "child" not in log_tail(log):
        assert time.monotonic() < deadline, log_tail(log)
        time.sleep(0.05)
    child_pid = int(log_tail(log).split()[1])
    assert _alive(child_pid)
    return process, child_pid


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("leader", ["exited", "killed", "running"])
def test_stop_ends_the_children_whatever_became_of_the_leader(tmp_path: Path, leader: str) -> None:
    process, child = _start_family(tmp_path, "exit" if leader == "exited" else "wait", _CHILD)
    assert process.pid is not None
    if leader == "killed":  # as when the OOM killer takes vLLM's API server
        os.kill(process.pid, signal.SIGKILL)
    if leader != "running":
        deadline = time.monotonic() + 10
        while process.running():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert _alive(child)  # orphaned: the leader's exit did not take it along
    started = time.monotonic()
    process.stop(grace_s=5.0)
    assert time.monotonic() - started < 3  # SIGTERM sufficed
    assert not _alive(child)
    assert not process.running()
    process.stop()  # a second stop is a no-op


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_an_orphan_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    process, child = _start_family(tmp_path, "exit", _STUBBORN_CHILD)
    deadline = time.monotonic() + 20
    while "ignoring SIGTERM" not in log_tail(tmp_path / "exit.log"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    started = time.monotonic()
    process.stop(grace_s=1.0)
    assert 0.9 < time.monotonic() - started < 5
    assert not _alive(child)
