"""``hi-moe-lora warmup`` against a real control plane whose one upstream does not listen.

Port 9 on the loopback refuses connections, so every warm-up result is ``failed`` with the
connect error as its detail: enough to follow the plan, the progress bar, the table, the JSON
report, the last report and the exit status without a vLLM.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hi_moe_lora.app.cli import main
from hi_moe_lora.app.processes import free_port
from hi_moe_lora.control_api import ControlPlaneClient
from tests.openai.live import ServedApp, control_plane_settings, serve_control_plane
from tests.support.adapter_files import DEFAULT_BASE_MODEL, write_adapter

NOWHERE = "http://127.0.0.1:9"


def _plane(workdir: Path, *, adapters: bool) -> ServedApp:
    served = serve_control_plane(control_plane_settings(workdir, DEFAULT_BASE_MODEL, [NOWHERE]))
    if adapters:
        client = ControlPlaneClient(served.url, timeout_s=30)
        client.register("sql-lora", "1.0.0", str(write_adapter(workdir / "sql")))
        client.register("py-lora", "1.0.0", str(write_adapter(workdir / "py", seed=1)))
    return served


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[str]:
    """A fresh control plane (no warm-up yet) serving sql-lora@1.0.0 and py-lora@1.0.0."""
    served = _plane(tmp_path, adapters=True)
    yield served.url
    served.stop()


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _bar_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("[")]


def test_the_plan_with_progress_then_a_table_and_exit_1(
    plane: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "warmup", "--url", plane)
    assert code == 1
    # not a terminal: one line per step, the bar filling up
    bars = _bar_lines(err)
    assert bars[0] == "[--------------------] 0/2 warming 2 versions on 1 upstreams"
    assert bars[1].startswith("[##########----------] 1/2 ")
    assert bars[2].startswith("[####################] 2/2 ")
    warmed = sorted(line.split()[2] for line in bars[1:])
    assert warmed == ["py-lora@1.0.0", "sql-lora@1.0.0"]
    assert f" on {NOWHERE}: failed " in bars[1]
    assert "ConnectError" in bars[1]
    assert err.splitlines()[-1] == "error: 2 of 2 warm-ups failed"
    # the table on stdout
    lines = out.splitlines()
    assert lines[0].split() == ["SERVED", "NAME", "UPSTREAM", "OUTCOME", "TIME", "LOAD", "DETAIL"]
    rows = [line.split(maxsplit=6) for line in lines[1:3]]
    assert [row[:3] for row in rows] == [
        ["py-lora@1.0.0", NOWHERE, "failed"],
        ["sql-lora@1.0.0", NOWHERE, "failed"],
    ]
    assert all(row[4] == "ms" and row[5] == "-" and "ConnectError" in row[6] for row in rows)
    assert lines[3].startswith("0 loaded, 2 failed in ")
    assert len(lines) == 4


def test_named_versions_only(plane: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "warmup", "sql-lora@1.0.0", "--url", plane)
    assert code == 1
    assert _bar_lines(err)[0] == "[--------------------] 0/1 warming 1 versions on 1 upstreams"
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == ["sql-lora@1.0.0"]
    assert err.splitlines()[-1] == "error: 1 of 1 warm-ups failed"


def test_unknown_names_are_refused_before_anything_runs(
    plane: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "warmup", "sql-lora", "ghost-lora", "--url", plane)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "error: Not found (adapter_not_found): no adapter named 'ghost-lora'"
    ]
    code, out, err = _run(capsys, "warmup", "sql-lora@9.9.9", "--url", plane)
    assert (code, out) == (1, "")
    assert "(version_not_found)" in err
    # nothing ran
    code, _, err = _run(capsys, "warmup", "--last", "--url", plane)
    assert code == 1
    assert "(no_warmup_yet)" in err


def test_json_prints_the_report(plane: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "warmup", "py-lora", "--json", "--url", plane)
    assert code == 1
    report = json.loads(out)
    assert (report["loaded"], report["failed"], report["reason"]) == (0, 1, "on demand")
    assert report["targets"] == [
        {"adapter": "py-lora", "version": "1.0.0", "served_name": "py-lora@1.0.0"}
    ]
    assert report["upstreams"] == [NOWHERE]
    (result,) = report["results"]
    assert (result["served_name"], result["outcome"], result["load_ms"]) == (
        "py-lora@1.0.0",
        "failed",
        None,
    )
    assert _bar_lines(err) == []  # no progress bar with --json
    assert err.splitlines()[-1] == "error: 1 of 1 warm-ups failed"


def test_last_shows_the_last_report(plane: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "warmup", "--last", "--url", plane)
    assert code == 1
    assert "error: Not found (no_warmup_yet)" in err
    _run(capsys, "warmup", "sql-lora", "--url", plane)

    code, out, err = _run(capsys, "warmup", "--last", "--url", plane)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("last warm-up: ")
    assert lines[0].endswith(" (on demand)")
    assert lines[2].split()[:3] == ["sql-lora@1.0.0", NOWHERE, "failed"]
    assert lines[3].startswith("0 loaded, 1 failed in ")
    assert err.splitlines()[-1] == "error: 1 of 1 warm-ups failed"

    code, out, _ = _run(capsys, "warmup", "--last", "--json", "--url", plane)
    assert code == 1
    assert [r["served_name"] for r in json.loads(out)["results"]] == ["sql-lora@1.0.0"]

    code, out, err = _run(capsys, "warmup", "--last", "sql-lora", "--url", plane)
    assert (code, out) == (1, "")
    assert "takes no adapter names" in err


def test_nothing_served_nothing_to_warm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    served = _plane(tmp_path, adapters=False)
    try:
        code, out, err = _run(capsys, "warmup", "--url", served.url)
    finally:
        served.stop()
    assert code == 0
    assert out.splitlines()[0] == "nothing to warm: no served version (or no upstream)"
    assert out.splitlines()[1].startswith("0 loaded, 0 failed in ")
    assert _bar_lines(err) == ["[####################] 0/0 warming 0 versions on 1 upstreams"]
    assert "error" not in err


def test_unreachable_control_plane(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "warmup", "--url", f"http://127.0.0.1:{free_port()}")
    assert (code, out) == (1, "")
    assert err.startswith("error: cannot reach the control plane")
