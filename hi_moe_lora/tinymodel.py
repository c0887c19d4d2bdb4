"""Build a tiny random Llama, its tokenizer and PEFT LoRA adapters locally (no hub).

Used by the tests and the demo: vLLM (CPU build) serves the model, and the adapters change its
output (``init_lora_weights=False`` plus a scale-up of ``lora_B``), so a request served by an
adapter is visibly different from one served by the base model.

Needs the ``tiny`` extra (torch, transformers, tokenizers, peft, safetensors); imports are local
so that importing this module costs nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: The projections a Llama decoder layer has; the default adapter targets all of them.
LLAMA_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

_TOKENIZER_CORPUS = (
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    "__global__ void add(float *x, float *y) { int i = threadIdx.x; y[i] = x[i] + y[i]; }\n",
    "The integral of x squared is x cubed over three, plus a constant.\n",
    "SELECT name, count(*) FROM adapters GROUP BY name ORDER BY 2 DESC;\n",
    "Write a Python function that sorts a list of numbers and explain the algorithm.\n",
    "Prove that the square root of two is irrational, step by step.\n",
    "kubectl apply -f deployment.yaml && docker build -t service:latest .\n",
    "Hello! How can I help you today? Please describe the task in detail.\n",
)

# A plain chat template: vLLM's /v1/chat/completions needs one on the tokenizer.
_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of the tiny Llama; head_dim 64 is one the vLLM CPU attention backend supports."""

    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    vocab_size: int = 512
    max_position_embeddings: int = 1024
    seed: int = 0


@dataclass(frozen=True)
class TinyAdapterSpec:
    """One PEFT LoRA adapter on the tiny model; ``seed`` makes its weights distinct."""

    rank: int = 8
    alpha: int = 16
    seed: int = 1
    target_modules: Sequence[str] = LLAMA_PROJECTIONS
    use_dora: bool = False
    #: an AdaLoRA adapter (``rank`` is its ``init_r``): random singular values, about a third
    #: of them pruned as its rank allocator would (``rank_pattern``)
    adalora: bool = False
    #: lora_B is multiplied by this after random init so that the adapter changes greedy output.
    strength: float = 4.0


@dataclass
class TinyFleet:
    """Where :func:`build_fleet` put the model and adapters."""

    model_dir: Path
    adapters: dict[str, Path] = field(default_factory=dict)


def build_tokenizer(target: Path, vocab_size: int) -> None:
    """Train a byte-level BPE tokenizer on a few lines and save it as a HF fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    special = ["<s>", "</s>", "<unk>", "<pad>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(_TOKENIZER_CORPUS) * 4, trainer=trainer)
    # transformers' constructors are untyped; Any keeps mypy strict elsewhere.
    tokenizer_class: Any = PreTrainedTokenizerFast
    fast = tokenizer_class(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    fast.chat_template = _CHAT_TEMPLATE
    fast.save_pretrained(str(target))


def build_model(target: Path, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """Write a random-weight Llama checkpoint (safetensors) and tokenizer to ``target``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    target.mkdir(parents=True, exist_ok=True)
    build_tokenizer(target, spec.vocab_size)
    torch.manual_seed(spec.seed)
    config = LlamaConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=3,
        tie_word_embeddings=False,
    )
    model_class: Any = LlamaForCausalLM
    model = model_class(config).to(torch.float32)
    model.save_pretrained(str(target), safe_serialization=True)
    logger.info("built tiny Llama in %s", target)
    return target


def build_adapter(model_dir: Path, target: Path, spec: TinyAdapterSpec = TinyAdapterSpec()) -> Path:
    """Write a PEFT LoRA, DoRA or AdaLoRA adapter for the model in ``model_dir`` to ``target``."""
    import torch
    from peft import AdaLoraConfig, LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    torch.manual_seed(spec.seed)
    base = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    config: Any
    if spec.adalora:
        config = AdaLoraConfig(
            init_r=spec.rank,
            target_r=max(1, spec.rank // 2),
            lora_alpha=spec.alpha,
            target_modules=list(spec.target_modules),
            total_step=100,
            init_lora_weights=False,
            task_type="CAUSAL_LM",
        )
    else:
        config = LoraConfig(
            r=spec.rank,
            lora_alpha=spec.alpha,
            target_modules=list(spec.target_modules),
            init_lora_weights=False,
            use_dora=spec.use_dora,
            task_type="CAUSAL_LM",
        )
    peft_model = get_peft_model(base, config)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.mul_(spec.strength)
        if spec.adalora:
            _prune_singular_values(peft_model, config)
    target.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(target), safe_serialization=True)
    pin_base_model(target, str(model_dir))
    logger.info("built rank-%d adapter (seed %d) in %s", spec.rank, spec.seed, target)
    return target


def _prune_singular_values(peft_model: Any, config: Any) -> None:
    """Zero about a third of every AdaLoRA module's singular values (never the first) and
    record them in ``rank_pattern``, as PEFT's rank allocator does; saving then keeps only the
    rows left."""
    import torch

    pattern: dict[str, list[bool]] = {}
    for name, module in peft_model.named_modules():
        singular = getattr(module, "lora_E", None)
        if singular is None or "default" not in singular:
            continue
        values = singular["default"]
        keep = torch.rand(values.shape[0]) > 1 / 3
        keep[0] = True
        values[~keep] = 0.0
        pattern[f"{name.removeprefix('base_model.model.')}.lora_E.default"] = keep.tolist()
    config.rank_pattern = pattern


def pin_base_model(adapter_dir: Path, base_model: str) -> None:
    """Make ``adapter_dir``'s config name ``base_model`` (registration checks that the adapter
    names the served base)."""
    config_path = adapter_dir / "adapter_config.json"
    config: dict[str, Any] = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = base_model
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


#: The demo fleet: two versions of python-lora, one math-lora, a DoRA docs-lora and an AdaLoRA
#: sql-lora.
DEMO_ADAPTERS: dict[str, TinyAdapterSpec] = {
    "python-lora-1.0.0": TinyAdapterSpec(rank=8, seed=11),
    "python-lora-1.1.0": TinyAdapterSpec(rank=16, alpha=32, seed=12),
    "math-lora-1.0.0": TinyAdapterSpec(rank=8, seed=21),
    # a DoRA adapter (magnitude vectors beside A and B), served by plugins.dora on the CPU
    "docs-lora-1.0.0": TinyAdapterSpec(rank=8, seed=41, use_dora=True),
    # an AdaLoRA adapter, converted into plain LoRA when it is registered
    "sql-lora-1.0.0": TinyAdapterSpec(rank=8, seed=51, adalora=True),
}


def build_fleet(
    root: Path,
    adapters: dict[str, TinyAdapterSpec] | None = None,
    spec: TinyModelSpec = TinyModelSpec(),
) -> TinyFleet:
    """Build the model and adapters under ``root`` (``root/model``, ``root/adapters/<key>``).

    Existing, complete outputs are reused, so calling it twice is cheap.
    """
    wanted = DEMO_ADAPTERS if adapters is None else adapters
    model_dir = root / "model"
    if not (model_dir / "model.safetensors").is_file():
        build_model(model_dir, spec)
    fleet = TinyFleet(model_dir=model_dir.resolve())
    for key, adapter_spec in wanted.items():
        adapter_dir = root / "adapters" / key
        if not (adapter_dir / "adapter_model.safetensors").is_file():
            build_adapter(fleet.model_dir, adapter_dir, adapter_spec)
        fleet.adapters[key] = adapter_dir.resolve()
    return fleet
