"""Our loggers write into vLLM's log inside a vLLM process."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT

# vLLM 0.32 configures its logging from the command line, after the plugins are loaded;
# 0.26 at import. The child does the same as a vLLM process: plugin first, logging after.
_CHILD = """
import logging
from plugins.logs import route_to_vllm_log
assert route_to_vllm_log()
assert not route_to_vllm_log()  # idempotent
logging.getLogger("plugins.punica").warning("a warning before vLLM's logging")
logging.basicConfig()  # a root handler must not write our lines a second time
try:
    from vllm.config.logging import LoggingConfig
    from vllm.logger import configure_logging
    configure_logging(LoggingConfig())
except ImportError:
    import vllm.logger
logging.getLogger("hi_moe_lora.kernels.triton_kernel").info("an INFO line of ours")
logging.getLogger("plugins.resolver").debug("a DEBUG line of ours")
"""


def test_our_info_lines_reach_vllms_log() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = done.stdout + done.stderr
    lines = [row for row in out.splitlines() if "an INFO line of ours" in row]
    assert len(lines) == 1
    assert " INFO " in lines[0]  # vLLM's format: level, then [file:line]
    assert "] an INFO line of ours" in lines[0]
    assert "a warning before vLLM's logging" in out
    assert "a DEBUG line of ours" not in out  # vLLM's level (INFO) applies
