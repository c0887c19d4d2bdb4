"""Our log lines in vLLM's log: the plugin's loggers hand their records to vLLM's handlers.

vLLM configures only its ``vllm`` logger (handler, format, level) and leaves the root logger
bare, so an INFO line of ``plugins`` or ``hi_moe_lora`` would be dropped inside a vLLM process.
The records are forwarded when they are emitted, not by copying handlers, so a later
reconfiguration of vLLM's logging (vLLM 0.32 configures it from the command line, after the
plugins load) is followed. Our loggers stop propagating, so a root handler (vLLM 0.26's
engine process has one) does not write the line a second time; where vLLM's logger has no
handler yet, warnings and errors still reach stderr as Python's default would write them.
"""

from __future__ import annotations

import logging

#: Top-level loggers of the code the plugin runs inside vLLM.
OUR_LOGGERS = ("plugins", "hi_moe_lora")


class ToVllmLog(logging.Handler):
    """Passes each record to the ``vllm`` logger's own handlers (their levels and format apply),
    or to Python's last-resort handler while vLLM's logger has none."""

    def emit(self, record: logging.LogRecord) -> None:
        handlers = logging.getLogger("vllm").handlers
        if not handlers and logging.lastResort is not None:
            handlers = [logging.lastResort]
        for handler in handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def route_to_vllm_log() -> bool:
    """Forward our loggers' records to vLLM's, unless someone configured our loggers already.

    Our loggers then pass INFO and above (vLLM's handler applies its own level). Returns
    whether anything was routed (False when every one of our loggers has a handler).
    """
    routed = False
    for name in OUR_LOGGERS:
        ours = logging.getLogger(name)
        if ours.handlers:
            continue
        ours.addHandler(ToVllmLog())
        if ours.level == logging.NOTSET:
            ours.setLevel(logging.INFO)
        ours.propagate = False
        routed = True
    return routed
