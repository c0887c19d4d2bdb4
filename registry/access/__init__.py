"""Access control: who may call what, and who did what.

Owns the scopes and the caller a request is admitted as (:mod:`.scopes`), the secrets and their
hashes (:mod:`.secrets`), the in-memory view of the valid tokens (:mod:`.keyring`: bootstrap
secrets from the settings plus the ``access_tokens`` table, refreshed), the rule deciding which
scope each surface needs (:mod:`.gatekeeper`), the start-up refusals (:mod:`.startup`) and the
typed refusals (:mod:`.errors`). May import the core library, ``registry.errors``,
``registry.db`` and ``registry.repositories``; routers reach it through
``registry.dependencies``.
"""
