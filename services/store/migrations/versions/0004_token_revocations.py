"""A revoked token keeps its row with ``revoked_at``: revoking it again (``DELETE`` after a
rotation, or a retried ``DELETE``) answers with the revocation instead of 404.

Revision ID: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM api_tokens WHERE revoked_at IS NOT NULL"))
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("revoked_at")
