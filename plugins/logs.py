"""Our log lines in vLLM's log: the plugin's loggers hand their records to vLLM's handlers.

vLLM configures only its ``vllm`` logger (handler, format, level) and leaves the root logger
bare, so an INFO line of ``plugins`` or ``hi_moe_lora`` would be dropped inside a vLLM process.
The records are forwarded when they are emitted, not by copying handlers, so a later
reconfiguration of vLLM's logging (vLLM 0.32 configures it from the command line, after the
plugins load) is followed. Our loggers still propagate, so whatever the root logger has (an
application's own logging, pytest's capture) sees every record once.
"""

from __future__ import annotations

import logging

#: Top-level loggers of the code the plugin runs inside vLLM.
OUR_LOGGERS = ("plugins", "hi_moe_lora")


class ToVllmLog(logging.Handler):
    """Passes each record to the ``vllm`` logger's own handlers (their levels and format apply)."""

    def emit(self, record: logging.LogRecord) -> None:
        for handler in logging.getLogger("vllm").handlers:
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
        routed = True
    return routed
