"""The dispatcher: per-specialist hints, richer routing gaps, request records for feedback.

Revision ID: 0002_dispatch
Revises: 0001_initial
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_dispatch"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("adapters") as batch:
        batch.add_column(
            sa.Column("dispatch_keywords", sa.JSON(), server_default="[]", nullable=False)
        )
        batch.add_column(
            sa.Column("dispatch_exemplars", sa.JSON(), server_default="[]", nullable=False)
        )
    with op.batch_alter_table("routing_gaps") as batch:
        batch.add_column(sa.Column("context_refs", sa.JSON(), server_default="[]", nullable=False))
        batch.add_column(sa.Column("terms", sa.JSON(), server_default="[]", nullable=False))
        batch.add_column(sa.Column("tier_scores", sa.JSON(), server_default="{}", nullable=False))
        batch.add_column(sa.Column("nearest_domain", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("nearest_score", sa.Float(), nullable=True))
        batch.add_column(sa.Column("request_id", sa.String(length=64), nullable=True))
        batch.create_index(op.f("ix_routing_gaps_created_at"), ["created_at"], unique=False)
    op.create_table(
        "request_records",
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("served_name", sa.Text(), nullable=False),
        sa.Column("adapter_version_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("feedback", sa.Boolean(), nullable=True),
        sa.Column("feedback_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["adapter_version_id"],
            ["adapter_versions.id"],
            name=op.f("fk_request_records_adapter_version_id_adapter_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_request_records")),
    )
    op.create_index(
        op.f("ix_request_records_created_at"), "request_records", ["created_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_request_records_created_at"), table_name="request_records")
    op.drop_table("request_records")
    with op.batch_alter_table("routing_gaps") as batch:
        batch.drop_index(op.f("ix_routing_gaps_created_at"))
        batch.drop_column("request_id")
        batch.drop_column("nearest_score")
        batch.drop_column("nearest_domain")
        batch.drop_column("tier_scores")
        batch.drop_column("terms")
        batch.drop_column("context_refs")
    with op.batch_alter_table("adapters") as batch:
        batch.drop_column("dispatch_exemplars")
        batch.drop_column("dispatch_keywords")
