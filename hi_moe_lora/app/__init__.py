"""The app layer: the only code that imports everything (core, plugins, control plane).

It holds what people run: the ``hi-moe-lora`` command line (:mod:`.cli`), the embedded stack
(:mod:`.embedded`: vLLM CPU + our plugins + the control plane on SQLite), the demo
(:mod:`.demo`), the vLLM launcher (:mod:`.vllm_launch`) and process management
(:mod:`.processes`). Nothing outside it imports it (``lint-imports`` checks).
"""
