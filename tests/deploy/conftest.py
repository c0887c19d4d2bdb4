"""Fixtures of the deploy tests: promtool (from PATH, or .tools/bin, or installed there once by
deploy/prometheus/install-promtool.sh; never skipped) and a runner showing its output."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = REPO_ROOT / "deploy" / "prometheus"
LOCAL_PROMTOOL = REPO_ROOT / ".tools" / "bin" / "promtool"
INSTALL_SCRIPT = PROMETHEUS_DIR / "install-promtool.sh"

Promtool = Callable[..., subprocess.CompletedProcess[str]]


def _find() -> str | None:
    on_path = shutil.which("promtool")
    if on_path:
        return on_path
    return str(LOCAL_PROMTOOL) if LOCAL_PROMTOOL.is_file() else None


@pytest.fixture(scope="session")
def promtool_path() -> str:
    found = _find()
    if found is None:
        install = subprocess.run(
            ["bash", str(INSTALL_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        found = _find()
        if install.returncode != 0 or found is None:
            pytest.fail(
                f"promtool is missing and {INSTALL_SCRIPT.relative_to(REPO_ROOT)} could not "
                f"install it (exit {install.returncode}):\n{install.stdout}{install.stderr}"
            )
    return found


@pytest.fixture
def promtool(promtool_path: str) -> Promtool:
    """Run ``promtool *args`` in the repository root; the result carries its output."""

    def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [promtool_path, *map(str, args)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return run


def output(result: subprocess.CompletedProcess[str]) -> str:
    """promtool's exit status and output, for assertion messages."""
    return f"promtool exited {result.returncode}:\n{result.stdout}{result.stderr}"
