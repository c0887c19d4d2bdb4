"""vLLM plugins of hi-moe-lora (entry-point group ``vllm.general_plugins``)."""
