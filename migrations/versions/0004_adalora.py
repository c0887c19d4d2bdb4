"""AdaLoRA adapters: a version's variant may be ``adalora`` (converted at registration).

Revision ID: 0004_adalora
Revises: 0003_access
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004_adalora"
down_revision: str | None = "0003_access"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NAME = "ck_adapter_versions_variant"


def _set_variants(condition: str) -> None:
    with op.batch_alter_table("adapter_versions") as batch:
        batch.drop_constraint(op.f(_NAME), type_="check")
        batch.create_check_constraint(op.f(_NAME), condition)


def upgrade() -> None:
    _set_variants("variant IN ('lora', 'dora', 'adalora')")


def downgrade() -> None:
    # An AdaLoRA version's artifact is plain LoRA already (the original is kept beside it).
    op.execute("UPDATE adapter_versions SET variant = 'lora' WHERE variant = 'adalora'")
    _set_variants("variant IN ('lora', 'dora')")
