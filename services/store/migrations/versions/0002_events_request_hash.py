"""Refit events (every fast update and NUTS refit, its outcome and the reason for a
rejection) and the request fingerprint of a lease (an idempotency key is bound to
the request that first used it).

Revision ID: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SEQ = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("seq", SEQ, primary_key=True, autoincrement=True),
        sa.Column("project_id", sa.String(200), nullable=False),
        sa.Column("dimension", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("method", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("num_judgments", sa.Integer, nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("replica", sa.String(200), nullable=False),
    )
    op.create_index("ix_events_project_seq", "events", ["project_id", "seq"])
    with op.batch_alter_table("leases") as batch:
        batch.add_column(sa.Column("request_hash", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.drop_column("request_hash")
    op.drop_index("ix_events_project_seq", "events")
    op.drop_table("events")
