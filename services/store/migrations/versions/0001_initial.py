"""Initial schema: projects, tokens, systems, prompts, dimensions, annotators,
judgments, snapshots, leases.

Revision ID: 0001
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
SEQ = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _id(name: str, *args: Any, **kw: Any) -> sa.Column[str]:
    return sa.Column(name, sa.String(200), *args, **kw)


def upgrade() -> None:
    op.create_table(
        "projects",
        _id("project_id", primary_key=True),
        _id("name", nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "api_tokens",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        _id(
            "project_id",
            sa.ForeignKey("projects.project_id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        _id("label", nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    for table, key in (
        ("systems", "system_id"),
        ("dimensions", "dimension_id"),
    ):
        op.create_table(
            table,
            _id("project_id", sa.ForeignKey("projects.project_id"), primary_key=True),
            _id(key, primary_key=True),
            sa.Column("description", sa.Text, nullable=False),
            sa.Column("created_at", TS, nullable=False),
        )
    op.create_table(
        "prompts",
        _id("project_id", sa.ForeignKey("projects.project_id"), primary_key=True),
        _id("prompt_id", primary_key=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("responses", sa.JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "annotators",
        _id("project_id", sa.ForeignKey("projects.project_id"), primary_key=True),
        _id("annotator_id", primary_key=True),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "judgments",
        sa.Column("seq", SEQ, primary_key=True, autoincrement=True),
        _id("project_id", sa.ForeignKey("projects.project_id"), nullable=False),
        _id("judgment_id", nullable=False),
        _id("item_id", nullable=False),
        _id("system_a", nullable=False),
        _id("system_b", nullable=False),
        _id("annotator_id", nullable=False),
        sa.Column("winner", sa.String(8), nullable=False),
        _id("dimension", nullable=False),
        sa.Column("shown_first", sa.String(1), nullable=True),
        sa.Column("timestamp", sa.String(64), nullable=True),
        sa.Column("received_at", TS, nullable=False),
        sa.UniqueConstraint("project_id", "judgment_id", name="uq_judgments_project_judgment"),
    )
    op.create_index(
        "ix_judgments_project_dimension_seq", "judgments", ["project_id", "dimension", "seq"]
    )
    op.create_table(
        "snapshots",
        _id("project_id", sa.ForeignKey("projects.project_id"), primary_key=True),
        _id("dimension", primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("num_judgments", sa.Integer, nullable=False),
        sa.Column("last_seq", sa.BigInteger, nullable=False),
        sa.Column("method", sa.String(16), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("fit_seconds", sa.Float, nullable=False),
        sa.Column("diagnostics", sa.JSON, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "leases",
        _id("lease_id", primary_key=True),
        _id("project_id", sa.ForeignKey("projects.project_id"), nullable=False),
        _id("idempotency_key", nullable=False),
        _id("annotator_id", nullable=False),
        sa.Column("cells", sa.JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.UniqueConstraint("project_id", "idempotency_key", name="uq_leases_project_key"),
    )
    op.create_index("ix_leases_project_expires", "leases", ["project_id", "expires_at"])


def downgrade() -> None:
    for table in (
        "leases",
        "snapshots",
        "judgments",
        "annotators",
        "prompts",
        "dimensions",
        "systems",
        "api_tokens",
        "projects",
    ):
        op.drop_table(table)
