"""Gold (attention-check) cells and their judgments: ``gold_cells`` (a cell with a known
answer, registered per project) and ``gold_judgments`` (the judgments of those cells, stored
apart on the write path so that no decision, fit or count reads them).

Revision ID: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "gold_cells",
        sa.Column("seq", seq, primary_key=True, autoincrement=True),
        sa.Column(
            "project_id", sa.String(200), sa.ForeignKey("projects.project_id"), nullable=False
        ),
        sa.Column("item_id", sa.String(200), nullable=False),
        sa.Column("system_a", sa.String(200), nullable=False),
        sa.Column("system_b", sa.String(200), nullable=False),
        sa.Column("dimension", sa.String(200), nullable=False),
        sa.Column("answer", sa.String(8), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint(
            "project_id", "item_id", "system_a", "system_b", "dimension", name="uq_gold_cells_cell"
        ),
    )
    op.create_table(
        "gold_judgments",
        sa.Column("seq", seq, primary_key=True, autoincrement=True),
        sa.Column(
            "project_id", sa.String(200), sa.ForeignKey("projects.project_id"), nullable=False
        ),
        sa.Column("judgment_id", sa.String(200), nullable=False),
        sa.Column("item_id", sa.String(200), nullable=False),
        sa.Column("system_a", sa.String(200), nullable=False),
        sa.Column("system_b", sa.String(200), nullable=False),
        sa.Column("annotator_id", sa.String(200), nullable=False),
        sa.Column("winner", sa.String(8), nullable=False),
        sa.Column("dimension", sa.String(200), nullable=False),
        sa.Column("shown_first", sa.String(1), nullable=True),
        sa.Column("timestamp", sa.String(64), nullable=True),
        sa.Column("screen_id", sa.String(200), nullable=True),
        sa.Column("lease_id", sa.String(200), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("project_id", "judgment_id", name="uq_gold_judgments_project_judgment"),
    )
    op.create_index("ix_gold_judgments_project_seq", "gold_judgments", ["project_id", "seq"])


def downgrade() -> None:
    op.drop_index("ix_gold_judgments_project_seq", table_name="gold_judgments")
    op.drop_table("gold_judgments")
    op.drop_table("gold_cells")
