"""Operations: keeping the served fleet ready and telling whether it is.

Owns readiness (the database at the Alembic head, used by start-up and ``/readyz``) and, next,
adapter warm-up and probe-based health of every upstream. May import the core library, the
registry's services and the fleet of upstreams; never the HTTP surface (``api``, ``openai``) or
the composition root.
"""
