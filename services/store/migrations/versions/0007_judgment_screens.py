"""``judgments.screen_id``: the ranked screen a pair came from, so that a screen's pairs
enter the service as the one unit they are in a file (the model's clusters).

Revision ID: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        batch.add_column(sa.Column("screen_id", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        batch.drop_column("screen_id")
