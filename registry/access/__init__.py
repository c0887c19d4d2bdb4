"""Access control: who may call what (admin token, the resolver's read-only token, callers of /v1).

Will own token settings, their comparison and the FastAPI dependencies that enforce them on the
routers. May import the core library and ``registry.errors``; never services or the HTTP surface
beyond the dependencies it hands to routers. Empty until the access-control issue lands.
"""
