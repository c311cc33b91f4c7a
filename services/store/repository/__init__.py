"""Keyword-only functions over the store's tables; each takes the connection as ``conn``.

Functions that write expect to run inside :meth:`services.store.Store.write`, so
that a caller's whole request is one transaction. One module per concern:
:mod:`.projects` (projects and tokens), :mod:`.events` (re-estimation events),
:mod:`.catalogue` (systems, prompts, dimensions), :mod:`.judgments`,
:mod:`.snapshots`, :mod:`.leases` (the next-batch recommender's), :mod:`.gold` (gold
cells and their judgments, apart from the judgments); what they
share is in :mod:`._common`, the row shapes they return in :mod:`.rows`. Callers import the package
(``from services.store import repository as repo``).
"""

from __future__ import annotations

from adaptive.core.data import JUDGMENT_FIELDS
from services.store.repository._common import (
    CHUNK,
    IngestResult,
    StoreError,
    as_utc,
    check_rows,
    hash_token,
    utcnow,
)
from services.store.repository.catalogue import (
    catalogue_version,
    count_prompts,
    list_dimensions,
    list_prompts,
    list_systems,
    upsert_dimensions,
    upsert_prompts,
    upsert_systems,
)
from services.store.repository.events import (
    add_events,
    latest_event_seq,
    list_events,
    prune_events,
)
from services.store.repository.gold import (
    GoldCellRow,
    GoldKey,
    add_gold_cells,
    count_gold_judgments,
    fetch_gold_judgments,
    gold_cells_taken,
    gold_keys,
    is_gold,
    list_gold_cells,
    prompt_responses,
)
from services.store.repository.judgments import (
    JUDGMENTS_CHANNEL,
    add_judgments,
    announce_judgments,
    count_judgments,
    fetch_judgment_columns,
    fetch_judgments,
    get_batch_by_key,
    judgment_counts_by_dimension,
    list_annotators,
    lock_judgments,
    save_batch_key,
)
from services.store.repository.leases import (
    active_leased_cells,
    create_lease,
    get_lease_by_key,
    lock_leases,
)
from services.store.repository.projects import (
    create_project,
    create_token,
    get_project,
    list_project_ids,
    list_tokens,
    project_for_token,
    revoke_token,
    token_id,
)
from services.store.repository.rows import (
    DimensionRow,
    EventRow,
    JudgmentRow,
    LeasedCellRow,
    LeaseRow,
    ProjectRow,
    PromptRow,
    SnapshotMeta,
    SystemRow,
    TokenRow,
)
from services.store.repository.snapshots import (
    latest_snapshot_meta,
    list_snapshots,
    prune_snapshots,
    save_snapshot,
    snapshot_payload,
)

__all__ = [
    "CHUNK",
    "DimensionRow",
    "EventRow",
    "GoldCellRow",
    "GoldKey",
    "IngestResult",
    "JUDGMENTS_CHANNEL",
    "JUDGMENT_FIELDS",
    "JudgmentRow",
    "LeaseRow",
    "LeasedCellRow",
    "ProjectRow",
    "PromptRow",
    "SnapshotMeta",
    "StoreError",
    "SystemRow",
    "TokenRow",
    "active_leased_cells",
    "add_events",
    "add_gold_cells",
    "count_gold_judgments",
    "add_judgments",
    "announce_judgments",
    "as_utc",
    "catalogue_version",
    "check_rows",
    "count_judgments",
    "count_prompts",
    "create_lease",
    "create_project",
    "create_token",
    "fetch_judgment_columns",
    "fetch_gold_judgments",
    "fetch_judgments",
    "get_batch_by_key",
    "lock_judgments",
    "save_batch_key",
    "get_lease_by_key",
    "gold_cells_taken",
    "gold_keys",
    "get_project",
    "hash_token",
    "is_gold",
    "judgment_counts_by_dimension",
    "latest_event_seq",
    "latest_snapshot_meta",
    "list_annotators",
    "list_dimensions",
    "list_events",
    "list_gold_cells",
    "list_project_ids",
    "list_prompts",
    "list_snapshots",
    "list_systems",
    "list_tokens",
    "lock_leases",
    "project_for_token",
    "prompt_responses",
    "prune_events",
    "prune_snapshots",
    "revoke_token",
    "save_snapshot",
    "snapshot_payload",
    "token_id",
    "upsert_dimensions",
    "upsert_prompts",
    "upsert_systems",
    "utcnow",
]
