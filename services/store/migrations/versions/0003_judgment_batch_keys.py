"""Idempotency keys of judgment batches: ``POST /judgments`` with an ``Idempotency-Key``
header stores the key with the fingerprint of its batch and the answer it got, so that a
retry gets the same answer and the key cannot be reused for another batch.

Revision ID: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "judgment_batches",
        sa.Column(
            "project_id", sa.String(200), sa.ForeignKey("projects.project_id"), primary_key=True
        ),
        sa.Column("idempotency_key", sa.String(200), primary_key=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("response", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("judgment_batches")
