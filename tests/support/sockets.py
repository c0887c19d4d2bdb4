"""TCP listeners that misbehave on purpose, standing in for a hung or overloaded vLLM.

- :func:`silent_listener`: connections are made (the kernel completes the handshake) but nothing
  is ever read or answered, like a vLLM whose process was stopped with SIGSTOP.
- :func:`unanswered_connects`: a listener whose accept queue is full, so the kernel drops new
  connection attempts and a client's connect hangs until its own timeout (Linux).
- :func:`hanging_up_listener`: accepts, reads the request, then closes the connection without a
  byte of answer, like a vLLM that died while it worked on the request.
"""

from __future__ import annotations

import contextlib
import socket
import threading
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


@contextlib.contextmanager
def hanging_up_listener() -> Iterator[tuple[str, list[int]]]:
    """``(url, taken)``: a listener that reads each request and hangs up without answering;
    ``taken`` grows by one per request it took."""
    taken: list[int] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    stopping = threading.Event()

    def serve() -> None:
        while not stopping.is_set():
            try:
                connection, _ = server.accept()
            except OSError:  # timeout (check stopping), or closed
                continue
            with connection:
                connection.settimeout(2)
                with contextlib.suppress(OSError):
                    connection.recv(65536)
                    taken.append(1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", taken
    finally:
        stopping.set()
        thread.join(timeout=5)
        server.close()
