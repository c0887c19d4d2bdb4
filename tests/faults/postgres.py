"""A private PostgreSQL server the fault tests own: started, stopped (as by a crash) and started
again on its own port and data directory, with Debian's server binaries.

The shared server (``HI_MOE_LORA_TEST_POSTGRES_URL``) must never be stopped by a test; this one
lives in a temporary directory for one test module or package. ``initdb`` refuses to run as
root, so as root the server runs as the ``postgres`` system user (``runuser``) in a directory
that user owns.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from hi_moe_lora.app.processes import free_port

PG_BIN = Path(os.environ.get("HI_MOE_LORA_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
SERVER_USER = "postgres"


def available() -> str | None:
    """Why a private server cannot be run here (``None``: it can)."""
    if not (PG_BIN / "initdb").exists():
        return f"no PostgreSQL server binaries in {PG_BIN} (HI_MOE_LORA_TEST_PG_BIN)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running as root and there is no {SERVER_USER!r} user to run initdb as"
    return None


class PrivatePostgres:
    """One PostgreSQL server on ``127.0.0.1:<free port>``, trust auth, user ``postgres``."""

    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="hml-private-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as_root = os.geteuid() == 0
        if self._as_root:
            user = pwd.getpwnam(SERVER_USER)
            os.chown(self.root, user.pw_uid, user.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = list(argv)
        if self._as_root:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if check and result.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}\n"
                f"{result.stderr}\n{log}"
            )
        return result

    def init(self) -> PrivatePostgres:
        self._run(
            str(PG_BIN / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        return self

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off"
        )
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options,
            "-w", "-t", "60", "start",
        )  # fmt: skip

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server; ``immediate`` is what a crash or a killed host looks like to us."""
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        result = self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "status", check=False)
        return result.returncode == 0

    def destroy(self) -> None:
        if self.data.exists() and self.running():
            self.stop("fast")
        shutil.rmtree(self.root, ignore_errors=True)
