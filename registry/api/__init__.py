"""HTTP API of the control plane: admin routers, health, problem+json errors."""
