"""The offset table that lets one kernel launch reach many tensors."""

from __future__ import annotations

import torch

from hi_moe_lora.kernels.tensor_table import device_table, element_offsets


def test_offsets_are_whole_elements_from_the_lowest_address() -> None:
    storage = torch.zeros(100, dtype=torch.bfloat16)
    later, earlier, middle = storage[60:70], storage[4:10], storage[30:40]
    located = element_offsets([later, earlier, middle])
    assert located is not None
    base, offsets = located
    assert base.data_ptr() == earlier.data_ptr()
    assert offsets == [56, 0, 26]


def test_separate_allocations_are_reached_from_the_base_too() -> None:
    tensors = [torch.randn(8) for _ in range(3)]
    located = element_offsets(tensors)
    assert located is not None
    base, offsets = located
    flat = base.as_strided((1,), (1,))  # the base's first element, addressed as the kernel does
    for tensor, offset in zip(tensors, offsets, strict=True):
        assert flat.data_ptr() + offset * tensor.element_size() == tensor.data_ptr()


def test_what_one_table_cannot_describe_is_declined() -> None:
    assert element_offsets([]) is None
    assert element_offsets([torch.zeros(4), torch.zeros(4, dtype=torch.float16)]) is None
    memory = bytearray(64)
    even = torch.frombuffer(memory, dtype=torch.bfloat16, offset=0, count=8)
    odd = torch.frombuffer(memory, dtype=torch.bfloat16, offset=1, count=8)
    assert element_offsets([even, odd]) is None  # one byte apart: no whole element


def test_the_table_is_int64_on_the_device_asked() -> None:
    table = device_table([[1, 2 << 40], [3, 4]], torch.device("cpu"))
    assert table.dtype == torch.int64
    assert table.tolist() == [[1, 2 << 40], [3, 4]]
