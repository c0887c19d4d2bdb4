"""Registering the package's torch ops in the ``hi_moe_lora`` namespace, without
``torch.library.custom_op``'s per-call cost.

``torch.library.custom_op`` wraps the function in Python layers (an autograd wrapper and the
op's own dispatch) that run on every call: the LoRA op took 68 µs a call on a development CPU,
against 6 µs defined in a :class:`torch.library.Library` with its function registered as the
CPU and CUDA kernels, 1 µs of which is the function's own (``benchmarks/kernels/
bench_op_host.py``, with vLLM's no-LoRA flag set, so no kernel work). CUDA graphs hide that
cost in decode steps, but vLLM runs steps larger than its largest graph (512 tokens by default)
op by op, and there a layer's LoRA op is called 128 times a step (Llama-3-8B shape).

The schema is inferred from the function's annotations (``torch.library.infer_schema``, the
mutated arguments marked), so ``torch.compile`` sees the same mutable op either way. Every op
here writes its results into arguments it mutates and returns nothing, so the shape-only
implementation tracing needs (``torch.library.register_fake``) does nothing, and one serves them
all; an op that returns a value is refused. The ops have no autograd formula; they serve
inference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

NAMESPACE = "hi_moe_lora"
#: Dispatch keys the function serves: CUDA tensors, and CPU ones (fallback and interpreter).
DISPATCH_KEYS = ("CPU", "CUDA")

_LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")  # type: ignore[no-untyped-call]


class OpRegistrationError(ValueError):
    """An op name outside the package's namespace, or an op that returns a value."""


def writes_in_place(*args: Any, **kwargs: Any) -> None:
    """The fake of every op here: its results are in the arguments it mutates."""
    return None


def register_op(qualname: str, function: Callable[..., None], mutates_args: Sequence[str]) -> Any:
    """Define ``qualname`` (``hi_moe_lora::<name>``) with ``function`` as its kernel and a fake
    that does nothing for tracing; returns the op (``torch.ops.hi_moe_lora.<name>``)."""
    namespace, _, name = qualname.partition("::")
    if namespace != NAMESPACE or not name:
        raise OpRegistrationError(f"op {qualname!r} is not named {NAMESPACE}::<name>")
    schema = torch.library.infer_schema(function, mutates_args=tuple(mutates_args))
    if not schema.endswith("-> ()"):
        raise OpRegistrationError(f"op {qualname!r} returns a value ({schema}); write it in place")
    _LIBRARY.define(name + schema)  # type: ignore[no-untyped-call]
    for key in DISPATCH_KEYS:
        _LIBRARY.impl(name, function, key)  # type: ignore[no-untyped-call]
    torch.library.register_fake(qualname, writes_in_place, lib=_LIBRARY)
    return getattr(getattr(torch.ops, NAMESPACE), name)
