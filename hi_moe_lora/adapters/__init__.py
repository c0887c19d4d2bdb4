"""Adapter artifacts: inspection, validation and checksums (shared by plugin and control plane)."""

from hi_moe_lora.adapters.errors import AdapterValidationError, ValidationCode
from hi_moe_lora.adapters.inspection import inspect_adapter
from hi_moe_lora.adapters.manifest import AdapterManifest, Variant
from hi_moe_lora.adapters.policy import base_models_match, check_policy

__all__ = [
    "AdapterManifest",
    "AdapterValidationError",
    "ValidationCode",
    "Variant",
    "base_models_match",
    "check_policy",
    "inspect_adapter",
]
