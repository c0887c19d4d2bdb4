"""Initial registry schema: adapters, versions, the lora_int_id counter, routing gaps.

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "adapters",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_adapters")),
        sa.UniqueConstraint("name", name=op.f("uq_adapters_name")),
    )
    op.create_table(
        "adapter_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("adapter_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=128), nullable=False),
        sa.Column("lora_int_id", sa.Integer(), nullable=False),
        sa.Column("source_uri", sa.Text(), nullable=False),
        sa.Column("local_path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("alpha", sa.Float(), nullable=False),
        sa.Column("target_modules", sa.JSON(), nullable=False),
        sa.Column("variant", sa.String(length=8), nullable=False),
        sa.Column("domains", sa.JSON(), nullable=False),
        sa.Column("base_model", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("previous_version", sa.String(length=128), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("traffic_weight", sa.Float(), nullable=False),
        sa.Column("avg_latency_ms", sa.Float(), nullable=True),
        sa.Column("success_rate", sa.Float(), nullable=True),
        sa.Column("request_count", sa.Integer(), nullable=False),
        sa.Column("success_count", sa.Integer(), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("variant IN ('lora', 'dora')", name=op.f("ck_adapter_versions_variant")),
        sa.CheckConstraint(
            "status IN ('inactive', 'active')", name=op.f("ck_adapter_versions_status")
        ),
        sa.CheckConstraint(
            "(status = 'active') = is_active",
            name=op.f("ck_adapter_versions_status_matches_is_active"),
        ),
        sa.CheckConstraint(
            "traffic_weight >= 0 AND traffic_weight <= 1",
            name=op.f("ck_adapter_versions_traffic_weight"),
        ),
        sa.CheckConstraint(
            "lora_int_id >= 1", name=op.f("ck_adapter_versions_lora_int_id_positive")
        ),
        sa.ForeignKeyConstraint(
            ["adapter_id"],
            ["adapters.id"],
            name=op.f("fk_adapter_versions_adapter_id_adapters"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_adapter_versions")),
        sa.UniqueConstraint(
            "adapter_id", "version", name=op.f("uq_adapter_versions_adapter_id_version")
        ),
        sa.UniqueConstraint("lora_int_id", name=op.f("uq_adapter_versions_lora_int_id")),
    )
    op.create_index(
        "uq_adapter_versions_one_active",
        "adapter_versions",
        ["adapter_id"],
        unique=True,
        sqlite_where=sa.text("is_active"),
        postgresql_where=sa.text("is_active"),
    )
    counter = op.create_table(
        "lora_id_counter",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("next_id", sa.Integer(), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_lora_id_counter_single_row")),
        sa.CheckConstraint("next_id >= 1", name=op.f("ck_lora_id_counter_next_id_positive")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lora_id_counter")),
    )
    op.bulk_insert(counter, [{"id": 1, "next_id": 1}])
    op.create_table(
        "routing_gaps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("task_excerpt", sa.Text(), nullable=False),
        sa.Column("extracted_domains", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_routing_gaps")),
    )


def downgrade() -> None:
    op.drop_table("routing_gaps")
    op.drop_table("lora_id_counter")
    op.drop_index("uq_adapter_versions_one_active", table_name="adapter_versions")
    op.drop_table("adapter_versions")
    op.drop_table("adapters")
