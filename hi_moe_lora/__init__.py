"""hi-moe-lora core: adapter inspection and validation, artifact cache, kernels."""

__version__ = "0.1.0"
