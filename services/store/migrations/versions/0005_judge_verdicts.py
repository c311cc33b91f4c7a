"""An automatic judge's verdicts, in a table of their own: ``POST /judge-verdicts`` stores them
(``annotator_id`` names the judge) and hybrid decisions read them beside the human judgments,
which they never join.

Revision ID: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "judge_verdicts",
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
        sa.Column("inconsistent", sa.Boolean, nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("project_id", "judgment_id", name="uq_judge_verdicts_project_judgment"),
    )
    op.create_index("ix_judge_verdicts_project_seq", "judge_verdicts", ["project_id", "seq"])


def downgrade() -> None:
    op.drop_index("ix_judge_verdicts_project_seq", table_name="judge_verdicts")
    op.drop_table("judge_verdicts")
