"""The judgment store on SQLite and PostgreSQL: migrations, all-or-nothing batches,
idempotency, hashed tokens, snapshots and leases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event, select, text

from services.store import Store
from services.store import repository as repo
from services.store import tables as t


def judgment(i: int, **kw: object) -> dict:
    row = {
        "judgment_id": f"j{i}",
        "item_id": f"p{i % 3}",
        "system_a": "x",
        "system_b": "y",
        "annotator_id": "w1",
        "winner": "a",
        "dimension": "overall",
    }
    row.update(kw)
    return row


@pytest.fixture
def store(database_url: str):
    store = Store(database_url)
    store.migrate()
    with store.write() as conn:
        repo.create_project(
            conn=conn, project_id="p", name="P", dimensions=[{"dimension_id": "overall"}]
        )
        repo.upsert_systems(
            conn=conn, project_id="p", systems=[{"system_id": s} for s in ("x", "y", "z")]
        )
        repo.upsert_prompts(
            conn=conn,
            project_id="p",
            prompts=[{"prompt_id": f"p{i}", "text": f"prompt {i}"} for i in range(3)],
        )
    yield store
    store.dispose()


def count(store: Store) -> int:
    with store.read() as conn:
        return repo.count_judgments(conn=conn, project_id="p")


def test_migrate_is_idempotent(store: Store) -> None:
    store.migrate()
    with store.read() as conn:
        version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    assert version == "0009"


def test_catalogue_version_moves_with_every_catalogue_write_and_no_judgment(store: Store) -> None:
    def version() -> int:
        with store.read() as conn:
            return repo.catalogue_version(conn=conn, project_id="p")

    before = version()
    assert before > 0  # the fixture registered systems, prompts and a dimension
    with store.write() as conn:
        repo.add_judgments(conn=conn, project_id="p", judgments=[judgment(0)])
    assert version() == before
    writes = [
        lambda conn: repo.upsert_systems(conn=conn, project_id="p", systems=[{"system_id": "x"}]),
        lambda conn: repo.upsert_prompts(
            conn=conn, project_id="p", prompts=[{"prompt_id": "p0", "responses": {"x": "hi"}}]
        ),
        lambda conn: repo.upsert_dimensions(
            conn=conn, project_id="p", dimensions=[{"dimension_id": "style"}]
        ),
    ]
    for write in writes:
        seen = version()
        with store.write() as conn:
            write(conn)
        assert version() > seen
    with store.read() as conn:
        assert repo.catalogue_version(conn=conn, project_id="nobody") == -1


def test_project_id_is_unique(store: Store) -> None:
    with pytest.raises(repo.StoreError) as err, store.write() as conn:
        repo.create_project(conn=conn, project_id="p", name="again")
    assert err.value.code == "project_exists"


def test_batch_is_idempotent_by_judgment_id(store: Store) -> None:
    batch = [judgment(i) for i in range(10)]
    with store.write() as conn:
        first = repo.add_judgments(conn=conn, project_id="p", judgments=batch)
    with store.write() as conn:
        again = repo.add_judgments(conn=conn, project_id="p", judgments=batch[5:] + [judgment(10)])
    assert (first.inserted, first.duplicates) == (10, 0)
    assert (again.inserted, again.duplicates) == (1, 5)
    assert count(store) == 11
    assert first.last_seq > 0 and again.last_seq > first.last_seq


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"system_a": "nobody"}, "system_a"),
        ({"system_b": "nobody"}, "system_b"),
        ({"item_id": "nowhere"}, "item_id"),
        ({"dimension": "style"}, "dimension"),
        ({"system_b": "x"}, "system_b"),
    ],
)
def test_one_bad_row_rejects_the_whole_batch(store: Store, bad: dict, field: str) -> None:
    batch = [judgment(i) for i in range(5)]
    batch[3] = judgment(3, **bad)
    with pytest.raises(repo.StoreError) as err, store.write() as conn:
        repo.add_judgments(conn=conn, project_id="p", judgments=batch)
    assert err.value.code == "invalid_batch"
    assert [(p["row"], p["field"]) for p in err.value.problems] == [(3, field)]
    assert count(store) == 0


def test_a_stored_judgment_cannot_be_changed(store: Store) -> None:
    with store.write() as conn:
        repo.add_judgments(conn=conn, project_id="p", judgments=[judgment(0)])
    with pytest.raises(repo.StoreError) as err, store.write() as conn:
        repo.add_judgments(
            conn=conn, project_id="p", judgments=[judgment(1), judgment(0, winner="b")]
        )
    assert err.value.problems[0]["row"] == 1
    assert "different winner" in err.value.problems[0]["message"]
    assert count(store) == 1


def test_one_judgment_id_twice_in_a_batch_refuses_it_whole(store: Store) -> None:
    """Else a gold cell's judgment and an ordinary one under one id land in both tables."""
    with store.write() as conn:
        repo.add_gold_cells(
            conn=conn,
            project_id="p",
            cells=[{"item_id": "p2", "system_a": "x", "system_b": "z", "answer": "a"}],
        )
    batch = [judgment(0), judgment(0, item_id="p2", system_b="z")]
    with pytest.raises(repo.StoreError) as err, store.write() as conn:
        repo.add_judgments(conn=conn, project_id="p", judgments=batch)
    assert err.value.code == "invalid_batch"
    assert [(p["row"], p["field"]) for p in err.value.problems] == [(1, "judgment_id")]
    assert "first in row 0" in err.value.problems[0]["message"]
    with store.read() as conn:
        assert count(store) == 0 and not repo.fetch_gold_judgments(conn=conn, project_id="p")


def test_tokens_are_stored_hashed(store: Store) -> None:
    with store.write() as conn:
        token = repo.create_token(conn=conn, project_id="p", label="tool")
    with store.read() as conn:
        stored = list(conn.execute(select(t.api_tokens)))
        assert repo.project_for_token(conn=conn, token=token) == "p"
        assert repo.project_for_token(conn=conn, token=token + "x") is None
    assert len(token) >= 40
    assert all(token not in " ".join(map(str, row)) for row in stored)
    assert [row.token_hash for row in stored] == [repo.hash_token(token)]


def test_snapshots_get_increasing_versions_and_old_fast_ones_are_pruned(store: Store) -> None:
    for i in range(5):
        with store.write() as conn:
            version = repo.save_snapshot(
                conn=conn,
                project_id="p",
                dimension="overall",
                num_judgments=i,
                last_seq=i,
                method="nuts" if i == 0 else "laplace",
                fit_seconds=0.1,
                diagnostics={"passed": True},
                payload=bytes([i]) * 10,
            )
            repo.prune_snapshots(conn=conn, project_id="p", dimension="overall", keep_fast=2)
        assert version == i + 1
    with store.read() as conn:
        versions = [m["version"] for m in repo.list_snapshots(conn=conn, project_id="p")]
        latest = repo.latest_snapshot_meta(conn=conn, project_id="p", dimension="overall")
        nuts = repo.latest_snapshot_meta(
            conn=conn, project_id="p", dimension="overall", method="nuts"
        )
        payload = repo.snapshot_payload(conn=conn, project_id="p", dimension="overall", version=5)
    assert versions == [5, 4, 1]
    assert latest is not None and latest["version"] == 5 and latest["created_at"].tzinfo
    assert nuts is not None and nuts["version"] == 1
    assert payload == bytes([4]) * 10


def test_leases_are_idempotent_and_expire(store: Store) -> None:
    now = datetime.now(UTC)
    with store.write() as conn:
        first = repo.create_lease(
            conn=conn,
            project_id="p",
            idempotency_key="k1",
            annotator_id="w1",
            cells=[{"item_id": "p0", "system_a": "x", "system_b": "y"}],
            expires_at=now + timedelta(minutes=10),
            now=now,
        )
        again = repo.create_lease(
            conn=conn,
            project_id="p",
            idempotency_key="k1",
            annotator_id="w1",
            cells=[{"item_id": "p1", "system_a": "x", "system_b": "z"}],
            expires_at=now + timedelta(minutes=10),
            now=now,
        )
    assert again["lease_id"] == first["lease_id"]
    assert again["cells"] == first["cells"]
    with store.read() as conn:
        found = repo.get_lease_by_key(conn=conn, project_id="p", idempotency_key="k1")
        active = repo.active_leased_cells(conn=conn, project_id="p", now=now)
        later = repo.active_leased_cells(conn=conn, project_id="p", now=now + timedelta(hours=1))
    assert found is not None and found["expires_at"] > now
    assert active == first["cells"] and later == []


def test_active_leased_cells_read_once_are_the_stored_cells_in_order(store: Store) -> None:
    """The kept cells of leases seen before (and the IN lists in parts of 500) give the
    rows a direct read of the table gives, in its order, as leases arrive and expire."""
    now = datetime.now(UTC)

    def direct(at: datetime) -> list:
        with store.read() as conn:
            rows = conn.execute(
                select(t.leases.c.cells).where(
                    t.leases.c.project_id == "p", t.leases.c.expires_at > at
                )
            )
            return [cell for (cells,) in rows for cell in cells]

    def cached(at: datetime) -> list:
        with store.read() as conn:
            return repo.active_leased_cells(conn=conn, project_id="p", now=at)

    cells_read: list[int] = []

    def count(conn, cursor, statement, parameters, context, executemany) -> None:
        if "leases.cells" in statement and "INSERT" not in statement:
            cells_read.append(1)

    event.listen(store.engine, "before_cursor_execute", count)
    for round_ in range(3):
        with store.write() as conn:
            for k in range(round_ * 600, (round_ + 1) * 600):
                repo.create_lease(
                    conn=conn,
                    project_id="p",
                    idempotency_key=f"k{k}",
                    annotator_id=f"w{k}",
                    cells=[{"item_id": f"p{k % 3}", "system_a": "x", "system_b": f"y{k}"}],
                    expires_at=now + timedelta(minutes=1 + k % 7),
                    now=now,
                )
        for at in (now, now + timedelta(minutes=4)):
            expected = direct(at)
            cells_read.clear()
            assert cached(at) == expected and cached(at) == expected
            # the 600 new leases' cells in two reads of at most 500 ids the first time,
            # none after
            assert len(cells_read) == (2 if at == now else 0)
    event.remove(store.engine, "before_cursor_execute", count)
    assert len(direct(now)) == 1800 and cached(now + timedelta(hours=1)) == []


def test_fetch_is_incremental_in_arrival_order(store: Store) -> None:
    with store.write() as conn:
        repo.add_judgments(conn=conn, project_id="p", judgments=[judgment(i) for i in range(4)])
    with store.read() as conn:
        rows, last = repo.fetch_judgment_columns(conn=conn, project_id="p", dimension="overall")
        more, last2 = repo.fetch_judgment_columns(
            conn=conn, project_id="p", dimension="overall", after_seq=rows[1][0]
        )
    assert [r[0] for r in rows] == sorted(r[0] for r in rows) and last == rows[-1][0]
    assert more == rows[2:] and last2 == last


def test_a_tail_by_seq_never_skips_a_judgment_of_a_concurrent_writer(store: Store) -> None:
    """Readers tail a project's judgments by ``seq``; a batch that took its sequence numbers
    first must also commit first, or a reader that already saw the later batch skips it."""
    import threading

    if store.is_sqlite:
        pytest.skip(
            "SQLite serialises every writer (BEGIN IMMEDIATE): nothing commits out of order"
        )
    with store.write() as conn:
        repo.add_judgments(conn=conn, project_id="p", judgments=[judgment(0)])
    seen: list[int] = []
    last = 0

    def tail() -> None:
        nonlocal last
        with store.read() as conn:
            rows, last = repo.fetch_judgment_columns(
                conn=conn, project_id="p", dimension="overall", after_seq=last
            )
        seen.extend(int(r[0]) for r in rows)

    tail()
    slow = store.engine.connect()
    slow_tx = slow.begin()
    repo.add_judgments(conn=slow, project_id="p", judgments=[judgment(i) for i in (1, 2)])

    def other_writer() -> None:
        with store.write() as conn:
            repo.add_judgments(conn=conn, project_id="p", judgments=[judgment(3)])

    writer = threading.Thread(target=other_writer)
    writer.start()
    writer.join(1.0)  # it waits for the first batch's commit, or (the bug) commits first
    tail()
    slow_tx.commit()
    slow.close()
    writer.join(30)
    tail()
    with store.read() as conn:
        stored, _ = repo.fetch_judgment_columns(conn=conn, project_id="p", dimension="overall")
    assert sorted(seen) == [int(r[0]) for r in stored] and len(stored) == 4


def test_a_fit_on_older_judgments_does_not_replace_a_newer_snapshot(store: Store) -> None:
    """Two replicas fit the same project; the slower one's older fit must not become latest."""

    def save(last_seq: int, method: str = "laplace") -> int | None:
        with store.write() as conn:
            return repo.save_snapshot(
                conn=conn,
                project_id="p",
                dimension="overall",
                num_judgments=last_seq,
                last_seq=last_seq,
                method=method,
                fit_seconds=0.1,
                diagnostics={},
                payload=b"x",
            )

    assert save(10) == 1
    assert save(20) == 2
    assert save(15) is None  # superseded: not stored, the newer snapshot stays the latest
    assert save(20) == 3  # the same data again (e.g. another replica) is stored
    assert save(5, "nuts") == 4  # a refit of another method is judged on its own
    with store.read() as conn:
        latest = repo.latest_snapshot_meta(conn=conn, project_id="p", dimension="overall")
        versions = [m["version"] for m in repo.list_snapshots(conn=conn, project_id="p")]
    assert latest is not None and latest["version"] == 4 and versions == [4, 3, 2, 1]


def test_an_open_batch_does_not_hold_up_snapshots_or_leases(store: Store) -> None:
    """The per-project ingest lock serialises batches only: a snapshot or a lease of the same
    project is stored while a batch is still open (PostgreSQL; SQLite has one writer)."""
    if store.is_sqlite:
        pytest.skip("SQLite serialises every writer")
    batch = store.engine.connect()
    batch_tx = batch.begin()
    try:
        repo.add_judgments(conn=batch, project_id="p", judgments=[judgment(0)])
        with store.write() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '3s'"))
            version = repo.save_snapshot(
                conn=conn,
                project_id="p",
                dimension="overall",
                num_judgments=0,
                last_seq=0,
                method="laplace",
                fit_seconds=0.1,
                diagnostics={},
                payload=b"x",
            )
            repo.lock_leases(conn=conn, project_id="p")
            lease = repo.create_lease(
                conn=conn,
                project_id="p",
                idempotency_key="k",
                annotator_id="w1",
                cells=[],
                expires_at=datetime.now(UTC) + timedelta(minutes=1),
            )
        assert version == 1 and lease["idempotency_key"] == "k"
    finally:
        batch_tx.rollback()
        batch.close()


def test_upserts_take_one_row_per_id(store: Store) -> None:
    """A library caller may name an id twice: the last entry wins (no PostgreSQL error)."""
    with store.write() as conn:
        created = repo.upsert_systems(
            conn=conn,
            project_id="p",
            systems=[
                {"system_id": "w", "description": "first"},
                {"system_id": "w", "description": "second"},
            ],
        )
    with store.read() as conn:
        systems = {s["system_id"]: s for s in repo.list_systems(conn=conn, project_id="p")}
    assert created == 1 and systems["w"]["description"] == "second"
