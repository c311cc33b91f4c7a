"""``judgments.screen_id``: the ranked screen a pair came from, so that a screen's pairs
enter the service as the one unit they are in a file (the model's clusters); and
``judgments.lease_id``: the next batch that served the judgment's cell, so that a routed
cell's recorded rates go to the judgment of that draw and to no other.

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
        batch.add_column(sa.Column("lease_id", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        batch.drop_column("lease_id")
        batch.drop_column("screen_id")
