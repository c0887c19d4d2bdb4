"""The fleet of vLLM upstreams: which replicas there are and how the control plane talks to them.

Owns the replica pool and its one HTTP client (:mod:`.upstreams`), and fleet-wide operations
such as making every replica forget a bare adapter name (:mod:`.invalidation`); next, adapter
affinity and failover across replicas. May import the core library only (and the standard
library, aiohttp); it knows nothing of OpenAI payloads or the registry's services.
"""
