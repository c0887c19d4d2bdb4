"""Persistence: typed SQLAlchemy models, engine/session setup and Alembic helpers."""
