"""The OpenAI-compatible front door: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``.

Clients use the stock ``openai`` client against the control plane and name a specialist
(``python-lora``), a pinned version (``python-lora@1.2.0``) or the base model; the request goes to
vLLM with ``model`` rewritten to the served ``name@version``.

Modules: :mod:`.endpoints` (the thin routes), :mod:`.proxy` (the request path, ``FrontDoor``),
:mod:`.targets` (which model a request names → where it goes), :mod:`.versions` (which version
serves a name, cached), :mod:`.outcomes` (latency/outcome statistics off the request path),
:mod:`.catalog` (``/v1/models`` cards), :mod:`.errors` (OpenAI-style error bodies).
May import the core library, the registry's services and the fleet of upstreams; the
composition root (``registry.app``) wires it.
"""
