"""The judgment store's tables (SQLAlchemy Core), the same for SQLite and PostgreSQL.

Changing a table here needs a new migration under ``migrations/versions``.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

ID = 200  # max length of client-chosen ids
# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid)
SEQ = BigInteger().with_variant(Integer(), "sqlite")

projects = Table(
    "projects",
    metadata,
    Column("project_id", String(ID), primary_key=True),
    Column("name", String(ID), nullable=False),
    Column("description", Text, nullable=False, default=""),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # raised by every write to the project's systems, prompts or dimensions (0006): a reader
    # that cached them reads this one number to know whether its copy is current
    Column("catalogue_version", Integer, nullable=False, default=0, server_default="0"),
)

api_tokens = Table(
    "api_tokens",
    metadata,
    # sha256 of the token; the token itself is never stored
    Column("token_hash", String(64), primary_key=True),
    Column(
        "project_id",
        String(ID),
        ForeignKey("projects.project_id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("label", String(ID), nullable=False, default=""),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # set when revoked (0004): the row stays, so revoking it again answers the same
    Column("revoked_at", DateTime(timezone=True), nullable=True),
    # what the token opens (0009): "full" (the project) or "write" (post judgments and
    # results only); the token's prefix says the same (services/store/repository/projects.py)
    Column("scope", String(8), nullable=False, default="full", server_default="full"),
)

systems = Table(
    "systems",
    metadata,
    Column("project_id", String(ID), ForeignKey("projects.project_id"), primary_key=True),
    Column("system_id", String(ID), primary_key=True),
    Column("description", Text, nullable=False, default=""),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

prompts = Table(
    "prompts",
    metadata,
    Column("project_id", String(ID), ForeignKey("projects.project_id"), primary_key=True),
    Column("prompt_id", String(ID), primary_key=True),
    Column("text", Text, nullable=False, default=""),
    Column("responses", JSON, nullable=False),  # system_id -> response text
    Column("created_at", DateTime(timezone=True), nullable=False),
)

dimensions = Table(
    "dimensions",
    metadata,
    Column("project_id", String(ID), ForeignKey("projects.project_id"), primary_key=True),
    Column("dimension_id", String(ID), primary_key=True),
    Column("description", Text, nullable=False, default=""),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

annotators = Table(
    "annotators",
    metadata,
    Column("project_id", String(ID), ForeignKey("projects.project_id"), primary_key=True),
    Column("annotator_id", String(ID), primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

judgments = Table(
    "judgments",
    metadata,
    Column("seq", SEQ, primary_key=True, autoincrement=True),
    Column("project_id", String(ID), ForeignKey("projects.project_id"), nullable=False),
    Column("judgment_id", String(ID), nullable=False),
    Column("item_id", String(ID), nullable=False),
    Column("system_a", String(ID), nullable=False),
    Column("system_b", String(ID), nullable=False),
    Column("annotator_id", String(ID), nullable=False),
    Column("winner", String(8), nullable=False),
    Column("dimension", String(ID), nullable=False),
    Column("shown_first", String(1), nullable=True),
    Column("timestamp", String(64), nullable=True),
    # the ranked screen the pair came from (0007): its pairs are one unit of the model
    Column("screen_id", String(ID), nullable=True),
    # the lease (next batch) that served the cell (0007): its routing rates are this draw's
    Column("lease_id", String(ID), nullable=True),
    Column("received_at", DateTime(timezone=True), nullable=False),
    # append-only and idempotent: one row per client-supplied judgment_id
    UniqueConstraint("project_id", "judgment_id", name="uq_judgments_project_judgment"),
    Index("ix_judgments_project_dimension_seq", "project_id", "dimension", "seq"),
)

# an automatic judge's verdicts (0005): never human judgments, so never in ``judgments``;
# ``annotator_id`` names the judge, one verdict per judge and cell
judge_verdicts = Table(
    "judge_verdicts",
    metadata,
    Column("seq", SEQ, primary_key=True, autoincrement=True),
    Column("project_id", String(ID), ForeignKey("projects.project_id"), nullable=False),
    Column("judgment_id", String(ID), nullable=False),
    Column("item_id", String(ID), nullable=False),
    Column("system_a", String(ID), nullable=False),
    Column("system_b", String(ID), nullable=False),
    Column("annotator_id", String(ID), nullable=False),
    Column("winner", String(8), nullable=False),
    Column("dimension", String(ID), nullable=False),
    Column("inconsistent", Boolean, nullable=False),
    Column("received_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("project_id", "judgment_id", name="uq_judge_verdicts_project_judgment"),
    Index("ix_judge_verdicts_project_seq", "project_id", "seq"),
)

snapshots = Table(
    "snapshots",
    metadata,
    Column("project_id", String(ID), ForeignKey("projects.project_id"), primary_key=True),
    Column("dimension", String(ID), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("num_judgments", Integer, nullable=False),
    Column("last_seq", BigInteger, nullable=False),
    Column("method", String(16), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("fit_seconds", Float, nullable=False),
    Column("diagnostics", JSON, nullable=False),
    Column("payload", LargeBinary, nullable=False),  # npz: draws, id maps, warm start
)

leases = Table(
    "leases",
    metadata,
    Column("lease_id", String(ID), primary_key=True),
    Column("project_id", String(ID), ForeignKey("projects.project_id"), nullable=False),
    Column("idempotency_key", String(ID), nullable=False),
    Column("annotator_id", String(ID), nullable=False),
    Column("cells", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    # SHA-256 of the request that first used the key (NULL for leases stored before 0002)
    Column("request_hash", String(64), nullable=True),
    UniqueConstraint("project_id", "idempotency_key", name="uq_leases_project_key"),
    Index("ix_leases_project_expires", "project_id", "expires_at"),
)

# the answer a judgment batch got under its Idempotency-Key (0003): a retry gets it again
judgment_batches = Table(
    "judgment_batches",
    metadata,
    Column("project_id", String(ID), ForeignKey("projects.project_id"), primary_key=True),
    Column("idempotency_key", String(ID), primary_key=True),
    Column("request_hash", String(64), nullable=False),  # SHA-256 of the batch
    Column("response", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

# what the re-estimation worker did: every fast update and NUTS refit with its outcome
events = Table(
    "events",
    metadata,
    Column("seq", SEQ, primary_key=True, autoincrement=True),
    Column("project_id", String(ID), nullable=False),
    Column("dimension", String(ID), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("kind", String(32), nullable=False),  # published, rejected, failed, superseded, ...
    Column("method", String(16), nullable=False),
    Column("version", Integer, nullable=False),
    Column("num_judgments", Integer, nullable=False),
    Column("seconds", Float, nullable=False),
    Column("detail", Text, nullable=False),  # the reason for a rejection or failure
    Column("replica", String(ID), nullable=False),  # host:pid of the worker
    Index("ix_events_project_seq", "project_id", "seq"),
)

# gold (attention-check) cells (0008): a cell whose answer is known, for the pair in this row's
# order; ``dimension`` "" holds for every dimension. Registered only while no judgment of the
# cell is stored (the running tallies would have counted it)
gold_cells = Table(
    "gold_cells",
    metadata,
    Column("seq", SEQ, primary_key=True, autoincrement=True),
    Column("project_id", String(ID), ForeignKey("projects.project_id"), nullable=False),
    Column("item_id", String(ID), nullable=False),
    Column("system_a", String(ID), nullable=False),
    Column("system_b", String(ID), nullable=False),
    Column("dimension", String(ID), nullable=False),
    Column("answer", String(8), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint(
        "project_id", "item_id", "system_a", "system_b", "dimension", name="uq_gold_cells_cell"
    ),
)

# judgments of gold cells (0008), stored apart on the write path: no decision, fit or count
# reads them (they read ``judgments``); the same columns, one judgment_id per project across
# both tables (add_judgments checks both)
gold_judgments = Table(
    "gold_judgments",
    metadata,
    Column("seq", SEQ, primary_key=True, autoincrement=True),
    Column("project_id", String(ID), ForeignKey("projects.project_id"), nullable=False),
    Column("judgment_id", String(ID), nullable=False),
    Column("item_id", String(ID), nullable=False),
    Column("system_a", String(ID), nullable=False),
    Column("system_b", String(ID), nullable=False),
    Column("annotator_id", String(ID), nullable=False),
    Column("winner", String(8), nullable=False),
    Column("dimension", String(ID), nullable=False),
    Column("shown_first", String(1), nullable=True),
    Column("timestamp", String(64), nullable=True),
    Column("screen_id", String(ID), nullable=True),
    Column("lease_id", String(ID), nullable=True),
    Column("received_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("project_id", "judgment_id", name="uq_gold_judgments_project_judgment"),
    Index("ix_gold_judgments_project_seq", "project_id", "seq"),
)
