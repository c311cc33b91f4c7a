"""A token's scope: ``full`` (every route of its project, as before) or ``write`` (post
judgments and results only, for webhooks and annotation tools). Existing tokens are ``full``.

Revision ID: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("scope", sa.String(8), nullable=False, server_default="full"))


def downgrade() -> None:
    # a write-only token must not become a full one
    op.execute(sa.text("DELETE FROM api_tokens WHERE scope <> 'full'"))
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("scope")
