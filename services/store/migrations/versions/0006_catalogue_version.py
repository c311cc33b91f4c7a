"""``projects.catalogue_version``: raised by every write to a project's systems, prompts or
dimensions, so that a reader holding them in memory (the next-batch route, the running
tallies) checks one number instead of reading them again.

Revision ID: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("projects") as batch:
        batch.add_column(
            sa.Column("catalogue_version", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("projects") as batch:
        batch.drop_column("catalogue_version")
