"""The control plane's HTTP API as its callers see it: paths, answer shapes and one client.

One owner for the contract between the control plane and everything that calls it (the resolver
plugin inside vLLM, the CLI, the demo). The control plane's routers use the same path templates
(:mod:`.paths`) and the same resolve answer (:class:`.answers.ResolvedAdapter`). Standard library
only, so the plugin can use it inside every vLLM process.
"""

from hi_moe_lora.control_api.answers import AnswerError, ArtifactFile, ResolvedAdapter
from hi_moe_lora.control_api.client import (
    ControlPlaneClient,
    ControlPlaneError,
    ControlPlaneUnreachable,
    NotFound,
)

__all__ = [
    "AnswerError",
    "ArtifactFile",
    "ControlPlaneClient",
    "ControlPlaneError",
    "ControlPlaneUnreachable",
    "NotFound",
    "ResolvedAdapter",
]
