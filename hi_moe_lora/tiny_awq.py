"""A 4-bit AWQ copy of a tiny model, and its dequantized float twin (no hub, no AutoAWQ).

DoRA on a quantized base (issue 16) needs a quantized checkpoint that vLLM serves with its own
AWQ kernels, and a float model that holds exactly the weights those kernels serve, so that PEFT
can compute the expected answers. :func:`build_awq_pair` quantizes every decoder projection of
a float checkpoint (:mod:`hi_moe_lora.tinymodel`'s, for instance) to 4 bits with a zero point
per group of ``group_size`` input features, writes it in AutoAWQ's GEMM layout (``qweight`` and
``qzeros`` int32 with eight 4-bit values each, packed in AWQ's interleaved order; ``scales``
float16) with a ``quantization_config`` vLLM reads, and writes the dequantized weights as a
plain float32 checkpoint beside it. Everything else (embeddings, norms, ``lm_head``) is copied
as float16.

Needs the ``tiny`` extra (torch, safetensors); imports are local. ``python -m
hi_moe_lora.tiny_awq SOURCE TARGET`` writes the AWQ copy alone (the GPU benchmarks' 8B base).
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: AutoAWQ packs output column ``8k + ORDER[i]`` into bits ``4i .. 4i+3`` of word ``k``.
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
#: The decoder projections that are quantized (a Llama's seven).
QUANTIZED_SUFFIXES = (
    "q_proj.weight",
    "k_proj.weight",
    "v_proj.weight",
    "o_proj.weight",
    "gate_proj.weight",
    "up_proj.weight",
    "down_proj.weight",
)
BITS = 4
_LEVELS = (1 << BITS) - 1


@dataclass(frozen=True)
class AwqPair:
    """Where :func:`build_awq_pair` put the AWQ checkpoint and its dequantized twin."""

    awq_dir: Path
    dequantized_dir: Path


def quantize(weight: Any, group_size: int) -> tuple[Any, Any, Any]:
    """``weight`` (``[out, in]``) as AWQ's integer levels, zero points and scales, each laid out
    input-major as AutoAWQ stores them: levels ``[in, out]`` and zero points ``[in /
    group_size, out]`` (int32, 0..15), scales ``[in / group_size, out]`` (float16)."""
    import torch

    out_features, in_features = weight.shape
    if in_features % group_size or out_features % 8:
        raise ValueError(
            f"a {out_features} x {in_features} weight does not split into groups of "
            f"{group_size} inputs and packs of 8 outputs"
        )
    grouped = weight.detach().to(torch.float32).T.reshape(-1, group_size, out_features)
    low = grouped.amin(dim=1).clamp(max=0.0)
    high = grouped.amax(dim=1).clamp(min=0.0)
    scales = ((high - low) / _LEVELS).clamp(min=1e-6).to(torch.float16)
    scale32 = scales.to(torch.float32)
    zeros = torch.round(-low / scale32).clamp(0, _LEVELS)
    levels = torch.round(grouped / scale32[:, None, :] + zeros[:, None, :]).clamp(0, _LEVELS)
    return (
        levels.reshape(in_features, out_features).to(torch.int32),
        zeros.to(torch.int32),
        scales,
    )


def dequantize(levels: Any, zeros: Any, scales: Any, group_size: int) -> Any:
    """The float32 weight (``[out, in]``) that AWQ levels, zero points and scales stand for."""
    import torch

    in_features, out_features = levels.shape
    grouped = levels.reshape(-1, group_size, out_features).to(torch.float32)
    values = (grouped - zeros[:, None, :].to(torch.float32)) * scales[:, None, :].to(torch.float32)
    return values.reshape(in_features, out_features).T.contiguous()


def pack(values: Any) -> Any:
    """4-bit ``values`` (``[rows, out]`` int32) packed eight to an int32 word in AWQ's order."""
    import torch

    rows, out_features = values.shape
    grouped = values.reshape(rows, out_features // 8, 8).to(torch.int64)
    word = torch.zeros(rows, out_features // 8, dtype=torch.int64)
    for position, column in enumerate(AWQ_PACK_ORDER):
        word |= grouped[:, :, column] << (BITS * position)
    # the top nibble may set bit 31: wrap into int32's range as the packed bits stand
    return torch.where(word >= 1 << 31, word - (1 << 32), word).to(torch.int32)


def unpack(words: Any) -> Any:
    """:func:`pack` undone: ``[rows, out / 8]`` int32 words to ``[rows, out]`` int32 values."""
    import torch

    rows, packs = words.shape
    wide = words.to(torch.int64) & 0xFFFFFFFF
    values = torch.zeros(rows, packs, 8, dtype=torch.int32)
    for position, column in enumerate(AWQ_PACK_ORDER):
        values[:, :, column] = ((wide >> (BITS * position)) & _LEVELS).to(torch.int32)
    return values.reshape(rows, packs * 8)


def _shards(source_dir: Path) -> tuple[list[str], dict[str, Any] | None]:
    """The checkpoint's weight files, and its index (``None`` for one ``model.safetensors``)."""
    index_path = source_dir / "model.safetensors.index.json"
    if not index_path.is_file():
        return ["model.safetensors"], None
    index: dict[str, Any] = json.loads(index_path.read_text("utf-8"))
    return sorted(set(index["weight_map"].values())), index


def build_awq_pair(
    source_dir: Path,
    target_dir: Path,
    group_size: int = 32,
    *,
    twin: bool = True,
    device: str = "cpu",
) -> AwqPair:
    """Quantize ``source_dir``'s decoder projections into ``target_dir/awq`` and, with
    ``twin``, write the weights AWQ serves (exactly: levels times float16 scales) as a float32
    checkpoint into ``target_dir/dequantized`` (both with ``source_dir``'s tokenizer). A
    sharded checkpoint stays sharded; ``device`` does the arithmetic (``cuda`` for an 8B
    model). Reuses a complete earlier build."""
    import torch
    from safetensors.torch import load_file, save_file

    pair = AwqPair(target_dir / "awq", target_dir / "dequantized")
    done = target_dir / "complete"
    if done.is_file():
        return pair
    files, index = _shards(source_dir)
    outputs = [pair.awq_dir, *([pair.dequantized_dir] if twin else [])]
    for directory in outputs:
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        for item in source_dir.iterdir():
            if item.is_file() and not item.name.startswith(("model", "config.json")):
                shutil.copy2(item, directory / item.name)
    weight_map: dict[str, str] = {}
    for file_name in files:
        quantized: dict[str, torch.Tensor] = {}
        dequantized: dict[str, torch.Tensor] = {}
        for name, tensor in load_file(str(source_dir / file_name), device=device).items():
            if not name.endswith(QUANTIZED_SUFFIXES):
                quantized[name] = tensor.to(torch.float16).cpu().contiguous()
                if twin:
                    dequantized[name] = quantized[name].to(torch.float32)
                continue
            levels, zeros, scales = (part.cpu() for part in quantize(tensor, group_size))
            stem = name.removesuffix(".weight")
            quantized[f"{stem}.qweight"] = pack(levels)
            quantized[f"{stem}.qzeros"] = pack(zeros)
            quantized[f"{stem}.scales"] = scales.contiguous()
            if twin:
                dequantized[name] = dequantize(levels, zeros, scales, group_size)
        save_file(quantized, str(pair.awq_dir / file_name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(quantized, file_name))
        if twin:
            save_file(dequantized, str(pair.dequantized_dir / file_name), metadata={"format": "pt"})
    config = json.loads((source_dir / "config.json").read_text("utf-8"))
    config.pop("torch_dtype", None)
    quantization = {
        "quant_method": "awq",
        "bits": BITS,
        "group_size": group_size,
        "zero_point": True,
        "version": "gemm",
    }
    awq_config = {**config, "dtype": "float16", "quantization_config": quantization}
    (pair.awq_dir / "config.json").write_text(json.dumps(awq_config, indent=2))
    if index is not None:
        awq_index = {**index, "weight_map": weight_map}
        (pair.awq_dir / "model.safetensors.index.json").write_text(json.dumps(awq_index))
    if twin:
        twin_config = {**config, "dtype": "float32"}
        (pair.dequantized_dir / "config.json").write_text(json.dumps(twin_config, indent=2))
        if index is not None:
            shutil.copy2(source_dir / "model.safetensors.index.json", pair.dequantized_dir)
    done.write_text("")
    logger.info("AWQ copy of %s in %s (group size %d)", source_dir, target_dir, group_size)
    return pair


def main(argv: list[str] | None = None) -> int:
    """``python -m hi_moe_lora.tiny_awq SOURCE TARGET [GROUP_SIZE]``: the AWQ copy alone (no
    twin), quantized on the GPU when there is one (the 8B benchmarks' base)."""
    import sys

    import torch

    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print(main.__doc__, file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    group_size = int(args[2]) if len(args) == 3 else 128
    pair = build_awq_pair(Path(args[0]), Path(args[1]), group_size, twin=False, device=device)
    print(pair.awq_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
