"""Business rules of the control plane (register/promote/rollback, traffic, statistics)."""
