"""A text progress bar for long CLI commands (standard library only).

:class:`ProgressBar` owns how progress is shown on a stream (normally stderr, so that stdout
keeps the command's result): on a terminal one line redrawn in place (``\\r``, cut to the
terminal's width so that it never wraps), anywhere else one line per step, which reads well in
logs and CI output. :func:`render_bar` draws the bar itself, e.g. ``[######----] 3/5``.
"""

from __future__ import annotations

import shutil
import sys
from typing import TextIO

DEFAULT_WIDTH = 20


def render_bar(done: int, total: int, width: int = DEFAULT_WIDTH) -> str:
    """``[####------] done/total``: ``width`` cells, filled in proportion (full when total is 0)."""
    done = max(0, min(done, total))
    filled = width if total <= 0 else done * width // total
    return f"[{'#' * filled}{'-' * (width - filled)}] {done}/{total}"


class ProgressBar:
    """Progress over ``total`` steps on ``stream`` (default: stderr).

    ``tty`` forces the in-place redraw on or off; by default it follows ``stream.isatty()``.
    """

    def __init__(
        self,
        total: int,
        *,
        stream: TextIO | None = None,
        width: int = DEFAULT_WIDTH,
        tty: bool | None = None,
    ) -> None:
        self.total = total
        self.done = 0
        self._stream = sys.stderr if stream is None else stream
        self._width = width
        self._tty = self._stream.isatty() if tty is None else tty
        self._shown = 0  # characters of the line on screen (terminal only)
        self._finished = False

    def line(self, message: str = "") -> str:
        """The current line: the bar, then ``message``."""
        bar = render_bar(self.done, self.total, self._width)
        return f"{bar} {message}".rstrip()

    def show(self, message: str = "") -> None:
        """Draw the bar as it is, with ``message``."""
        self._show(self.line(message))

    def advance(self, message: str = "", steps: int = 1) -> None:
        """``steps`` more are done; draw the bar with ``message`` (what was just done)."""
        self.done = min(self.total, self.done + steps)
        self.show(message)

    def finish(self) -> None:
        """End the bar's line on a terminal (nothing to do elsewhere); idempotent."""
        if self._finished:
            return
        self._finished = True
        if self._tty and self._shown:
            self._stream.write("\n")
            self._stream.flush()

    def _show(self, text: str) -> None:
        if not self._tty:
            self._stream.write(text + "\n")
            self._stream.flush()
            return
        columns = shutil.get_terminal_size().columns
        text = text[: max(columns - 1, 1)]  # a wrapped line cannot be redrawn with \r
        padding = " " * max(self._shown - len(text), 0)  # wipe what a longer line left
        self._stream.write("\r" + text + padding)
        self._stream.flush()
        self._shown = len(text)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()
