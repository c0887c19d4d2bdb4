"""Ops registered directly in the package's library: schema with the mutated arguments, the
function as the CPU kernel, the fake for tracing, torch.compile, and a namespace check."""

from __future__ import annotations

import pytest
import torch

from hi_moe_lora.kernels.op_registry import OpRegistrationError, register_op


def _scaled_add(y: torch.Tensor, x: torch.Tensor, scale: float, rows: list[torch.Tensor]) -> None:
    """``y += scale * x + sum(rows)`` in place."""
    y.add_(x, alpha=scale)
    for row in rows:
        y.add_(row)


OP = register_op("hi_moe_lora::test_scaled_add", _scaled_add, ("y",))


def test_schema_marks_the_mutated_argument_only() -> None:
    schema = str(OP.default._schema)
    assert schema.startswith("hi_moe_lora::test_scaled_add(Tensor(a0!) y, Tensor x, float scale")
    assert "Tensor[] rows" in schema
    assert schema.count("!") == 1
    assert OP is torch.ops.hi_moe_lora.test_scaled_add


def test_runs_the_function_in_place_on_cpu() -> None:
    y = torch.ones(3, 4)
    OP(y, torch.full((3, 4), 2.0), 0.5, [torch.ones(4), torch.ones(4)])
    assert torch.equal(y, torch.full((3, 4), 4.0))


def test_opcheck_schema_and_fake() -> None:
    args = (torch.randn(3, 4), torch.randn(3, 4), 0.5, [torch.randn(4)])
    torch.library.opcheck(OP, args, test_utils=("test_schema", "test_faketensor"))


def test_runs_under_torch_compile_fullgraph() -> None:
    x = torch.randn(3, 4)

    def layer(y: torch.Tensor) -> torch.Tensor:
        out = y * 1
        OP(out, x, 2.0, [])
        return out

    y = torch.randn(3, 4)
    got = torch.compile(layer, fullgraph=True, backend="aot_eager")(y)
    assert torch.allclose(got, y + 2.0 * x)


@pytest.mark.parametrize("name", ["other::op", "hi_moe_lora::", "lora_linear"])
def test_refuses_names_outside_the_namespace(name: str) -> None:
    with pytest.raises(OpRegistrationError, match="hi_moe_lora::<name>"):
        register_op(name, _scaled_add, ("y",))


def test_refuses_an_op_that_returns_a_value() -> None:
    """Its fake would have to build the value; the package's ops write in place."""

    def doubled(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    with pytest.raises(OpRegistrationError, match="returns a value"):
        register_op("hi_moe_lora::test_doubled", doubled, ())
