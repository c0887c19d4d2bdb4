"""The CLI's progress bar: the bar, on a terminal (redrawn in place), in a log (a line a step)."""

from __future__ import annotations

import io

import pytest

from hi_moe_lora.app.cli.progress import ProgressBar, render_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("done", "total", "expected"),
    [
        (0, 8, "[----------] 0/8"),
        (3, 8, "[###-------] 3/8"),
        (8, 8, "[##########] 8/8"),
        (9, 8, "[##########] 8/8"),
        (-1, 8, "[----------] 0/8"),
        (0, 0, "[##########] 0/0"),
    ],
)
def test_render_bar(done: int, total: int, expected: str) -> None:
    assert render_bar(done, total, width=10) == expected


def test_not_a_terminal_one_line_per_step() -> None:
    stream = io.StringIO()
    with ProgressBar(2, stream=stream, width=4) as bar:
        bar.show("starting")
        bar.advance("a done")
        bar.advance("b done")
        bar.advance("too many")  # stays at the total
    assert stream.getvalue().splitlines() == [
        "[----] 0/2 starting",
        "[##--] 1/2 a done",
        "[####] 2/2 b done",
        "[####] 2/2 too many",
    ]
    assert "\r" not in stream.getvalue()


def test_a_terminal_redraws_in_place_and_ends_the_line_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    stream = _Terminal()
    bar = ProgressBar(2, stream=stream, width=4)
    assert bar.line() == "[----] 0/2"
    bar.advance("a long first message")
    bar.advance("short")
    bar.finish()
    bar.finish()
    first, second = "[##--] 1/2 a long first message", "[####] 2/2 short"
    wipe = " " * (len(first) - len(second))
    assert stream.getvalue() == f"\r{first}\r{second}{wipe}\n"


def test_a_terminal_line_never_wraps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "20")
    stream = _Terminal()
    with ProgressBar(1, stream=stream, width=4) as bar:
        bar.advance("x" * 100)
    assert stream.getvalue() == "\r[####] 1/1 xxxxxxxx\n"  # 19 columns: the cursor keeps one


def test_tty_can_be_forced_and_finish_without_a_step_writes_nothing() -> None:
    stream = io.StringIO()
    ProgressBar(3, stream=stream, tty=True).finish()
    assert stream.getvalue() == ""
    terminal = _Terminal()
    ProgressBar(3, stream=terminal, tty=False).advance("one")
    assert terminal.getvalue() == "[######--------------] 1/3 one\n"
