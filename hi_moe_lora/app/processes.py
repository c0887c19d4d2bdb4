"""Start, wait for and stop the server processes of the demo and the test suite.

Each process runs in its own process group with its output in a log file, so that stopping it
also stops the workers it forked (vLLM starts an engine core and workers), and a failed start
can show the end of the log instead of hanging.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

logger = logging.getLogger(__name__)


_Started = TypeVar("_Started", bound="StartStop")


class StartStop(abc.ABC):
    """``with thing:`` starts it and always stops it; subclasses define start() and stop()."""

    @abc.abstractmethod
    def start(self: _Started) -> _Started: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    def __enter__(self: _Started) -> _Started:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class ProcessStartError(RuntimeError):
    """A managed process exited or did not become ready in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file ('' if it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ManagedProcess(StartStop):
    """A server process with a log file, a readiness probe and a clean stop."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:  # a restart keeps the earlier output
            self._process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        logger.info("started %s (pid %d), log: %s", self.name, self._process.pid, self.log_path)
        return self

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def wait_http_ok(self, url: str, timeout_s: float, interval_s: float = 0.5) -> None:
        """Poll ``url`` until it answers 200; fail early if the process exits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.running():
                raise ProcessStartError(
                    f"{self.name} exited during start-up; end of {self.log_path}:\n"
                    + log_tail(self.log_path)
                )
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(interval_s)
        raise ProcessStartError(
            f"{self.name} was not ready at {url} after {timeout_s:.0f} s; end of "
            f"{self.log_path}:\n" + log_tail(self.log_path)
        )

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop the whole process group: SIGTERM, then SIGKILL whatever is left after ``grace_s``.

        The group is the leader's session (``start_new_session``): vLLM's API server, its engine
        core and workers. It is signalled also when the leader has already exited, since its
        children may not have (they would be orphaned, holding memory and ports).
        """
        process = self._process
        if process is None:
            return
        group = process.pid  # the leader of a new session leads its process group
        if process.poll() is not None and not _group_alive(group):
            return
        _signal_group(group, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while process.poll() is None or _group_alive(group):
            if time.monotonic() >= deadline:
                logger.warning("%s did not stop in %.0f s; killing it", self.name, grace_s)
                _signal_group(group, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=10)
                _wait_group_gone(group, timeout_s=10)
                break
            time.sleep(0.05)
        logger.info("stopped %s", self.name)


def _signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _group_alive(group: int) -> bool:
    """Whether a live (not zombie) process is still in process group ``group``.

    Reads ``/proc`` where there is one (a zombie, exited but not yet reaped by its parent, is
    gone for our purpose), else asks the kernel with signal 0.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def _wait_group_gone(group: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.05)
