"""TCP listeners that misbehave on purpose, standing in for a hung or overloaded vLLM.

- :func:`silent_listener`: connections are made (the kernel completes the handshake) but nothing
  is ever read or answered, like a vLLM whose process was stopped with SIGSTOP.
- :func:`unanswered_connects`: a listener whose accept queue is full, so the kernel drops new
  connection attempts and a client's connect hangs until its own timeout (Linux).
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator


@contextlib.contextmanager
def silent_listener() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a listener that never accepts, reads or answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


@contextlib.contextmanager
def unanswered_connects() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` where connecting hangs (the accept queue is full)."""
    fillers: list[socket.socket] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        try:
            for _ in range(3):  # a backlog of 0 still queues one connection; fill it
                filler = socket.socket()
                filler.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
                fillers.append(filler)
            time.sleep(0.1)
            yield f"http://127.0.0.1:{port}"
        finally:
            for filler in fillers:
                filler.close()
