"""Freshness: time from an accepted batch to a published snapshot that includes it.

A campaign of ``--comparisons`` system pairs x ``--prompts`` prompts is preloaded
with ``--judgments`` judgments into a fresh store, the first snapshot is fitted
(compilation happens here, outside the measurement), then ``--batches`` batches
of ``--batch`` judgments arrive every ``--interval`` seconds exactly as the API
stores them (one write transaction, then a notification of the background
worker). The worker records, for every batch, the time until a snapshot whose
``last_seq`` covers it was published. Prints p50/p95 and where the time of one
fast update goes.

With the service's default settings every update is a full MAP + Laplace fit of
every judgment (items included); ``--skill-updates`` measures the opt-in skill-only
updates with items refitted in the background, ``--cell-effect`` the opt-in model
with the prompt-by-comparison effect. ``--duration`` sends batches for that many
seconds instead of ``--batches`` of them. The figure to read is ``freshness``: its
max is the longest any accepted batch waited for a snapshot that includes it.

Example (the live-engine target: 100,000 judgments, 13 systems, 78 pairs, 2,300 prompts,
50 new judgments every 0.5 s for 10 minutes):
    python benchmarks/freshness.py --judgments 100000 --comparisons 78 --prompts 2300 \
        --duration 600
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from latency import summarize_ms


def simulate(
    num: int, num_systems: int, num_comparisons: int, num_prompts: int, seed: int, start: int = 0
) -> list[dict]:
    """Judgments cycling through (comparison, prompt) cells so every cell fills evenly."""
    rng = np.random.default_rng(seed + start)
    pairs = list(itertools.combinations(range(num_systems), 2))[:num_comparisons]
    skill = np.random.default_rng(seed).normal(size=num_systems)
    rows = []
    for k in range(start, start + num):
        cell = k % (num_comparisons * num_prompts)
        a, b = pairs[cell % num_comparisons]
        p = cell // num_comparisons
        u = skill[b] - skill[a] + rng.logistic()
        rows.append(
            {
                "judgment_id": f"f{k}",
                "item_id": f"prompt{p:04d}",
                "system_a": f"sys{a:02d}",
                "system_b": f"sys{b:02d}",
                "annotator_id": f"ann{k % 40}",
                "winner": "b" if u > 0.5 else "a" if u < -0.5 else "tie",
                "dimension": "overall",
            }
        )
    return rows


def pct(values: list[float]) -> dict[str, float | int]:
    return summarize_ms(values, quantiles=(50, 95), digits=1)


def profile_update(state, key: tuple[str, str]) -> dict:  # noqa: ANN001
    """Time the pieces of one fast update (the worker does the same steps)."""
    import jax

    from adaptive.core.cells import build_cells
    from adaptive.estimation.fitting import model_data
    from adaptive.estimation.snapshot import encode_snapshot, snapshot_from_posterior
    from adaptive.estimation.streaming import remap_init
    from stan_free_models.laplace import fit_laplace

    out: dict[str, float] = {}
    previous = state.latest_fast(key)
    t = time.perf_counter()
    source = state.load_source(key)
    out["load_judgments_s"] = time.perf_counter() - t
    t = time.perf_counter()
    cells = build_cells(source.judgments, dimension=source.dimension, systems=source.systems)
    out["build_cells_s"] = time.perf_counter() - t
    t = time.perf_counter()
    init = remap_init(previous, cells)
    data = model_data(cells, likelihood="judgment", parameterization="system")
    out["model_data_and_init_s"] = time.perf_counter() - t
    t = time.perf_counter()
    post = fit_laplace(data, rng_key=jax.random.PRNGKey(1), init=init, num_draws=1000)
    out["fit_laplace_s"] = time.perf_counter() - t
    out["lbfgs_steps"] = float(post.diagnostics.num_steps)
    out["padded_shape"] = str(post.info["padded_shape"])  # type: ignore[assignment]
    # the fixed part of a fit: one L-BFGS step, the block Hessian, 1000 draws (own compile)
    fit_laplace(data, rng_key=jax.random.PRNGKey(1), init=init, num_draws=1000, max_iter=1)
    t = time.perf_counter()
    fit_laplace(data, rng_key=jax.random.PRNGKey(1), init=init, num_draws=1000, max_iter=1)
    out["fit_one_step_hessian_draws_s"] = time.perf_counter() - t
    fit_laplace(data, rng_key=jax.random.PRNGKey(1), init=init, num_draws=10, max_iter=1)
    t = time.perf_counter()
    fit_laplace(data, rng_key=jax.random.PRNGKey(1), init=init, num_draws=10, max_iter=1)
    out["fit_one_step_hessian_10_draws_s"] = time.perf_counter() - t
    t = time.perf_counter()
    snap = snapshot_from_posterior(
        post, cells, num_judgments=source.num_judgments, last_seq=source.last_seq
    )
    payload = encode_snapshot(snap)
    out["pack_and_encode_s"] = time.perf_counter() - t
    out["payload_mb"] = len(payload) / 1e6
    t = time.perf_counter()
    state.publish(key, snap)
    out["store_snapshot_s"] = time.perf_counter() - t

    # the skill-only update (items held): its parts
    from adaptive.estimation.skill_update import encode_judgments, skill_snapshot
    from adaptive.estimation.streaming import fit_snapshot, stream_config

    _, base = fit_snapshot(
        source.judgments,
        dimension=source.dimension,
        systems=source.systems,
        # skill-only updates need independent judgments: the model without the cell effect
        config=stream_config("fast", num_draws=500, cell_effect=False),
        last_seq=source.last_seq,
        previous=previous,
        with_base=True,
    )
    init = base.snapshot.mode["global"][: len(source.systems)]
    skill_snapshot(base, source, init=init, num_draws=500)  # compile
    t = time.perf_counter()
    source = state.load_source(key)
    out["skills_load_judgments_s"] = time.perf_counter() - t
    t = time.perf_counter()
    encode_judgments(base, source.judgments)
    out["skills_encode_rows_s"] = time.perf_counter() - t
    t = time.perf_counter()
    snap = skill_snapshot(base, source, init=init, num_draws=500)
    out["skills_snapshot_s"] = time.perf_counter() - t
    out["skills_newton_steps"] = float(snap.diagnostics["num_steps"])
    t = time.perf_counter()
    payload = encode_snapshot(snap)
    out["skills_encode_payload_s"] = time.perf_counter() - t
    t = time.perf_counter()
    state.publish(key, snap)
    out["skills_store_snapshot_s"] = time.perf_counter() - t
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}


def record_publishes(refresher) -> list[tuple[float, int, int, str, float]]:  # noqa: ANN001
    """A list that collects (wall time, last_seq, judgments, method, fit seconds) of every
    snapshot the refresher stores from now on (the store keeps only the newest ten)."""
    published: list[tuple[float, int, int, str, float]] = []
    publish = refresher.publish_fn

    def recorded(key, snapshot):  # noqa: ANN001, ANN202
        version = publish(key, snapshot)
        if version is not None:
            published.append(
                (
                    time.time(),
                    snapshot.last_seq,
                    snapshot.num_judgments,
                    snapshot.method,
                    snapshot.fit_seconds,
                )
            )
        return version

    refresher.publish_fn = recorded
    return published


def slowest_batches(
    published: list[tuple[float, int, int, str, float]], accepted: list[tuple[float, int]]
) -> list[dict]:
    """The five batches that waited longest for a stored snapshot including them, and the
    gap before that snapshot (a long gap: a slow update; a short one: a missed update)."""
    if not accepted:
        return []
    start = accepted[0][0]
    rows = []
    for at, seq in accepted:
        after = [x for x in published if x[1] >= seq]
        if not after:
            continue
        first = after[0]
        before = [x for x in published if x[0] < first[0]]
        rows.append(
            {
                "accepted_at_s": round(at - start, 1),
                "waited_s": round(first[0] - at, 2),
                "snapshot_judgments": first[2],
                "method": first[3],
                "fit_s": round(first[4], 2),
                "gap_before_s": round(first[0] - before[-1][0], 2) if before else None,
            }
        )
    return sorted(rows, key=lambda r: -r["waited_s"])[:5]


def watch_compiles() -> list[tuple[str, float]]:
    """A list that collects (program, seconds) of every XLA compile from now on."""
    from jax import monitoring

    compiles: list[tuple[str, float]] = []

    def listen(event: str, seconds: float, **kwargs: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append((str(kwargs.get("fun_name", "?")), round(seconds, 2)))

    monitoring.register_event_duration_secs_listener(listen)
    return compiles


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--judgments", type=int, default=10_000, help="preloaded judgments")
    parser.add_argument("--comparisons", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between batches")
    parser.add_argument("--database-url", help="default: a fresh SQLite file")
    parser.add_argument("--profile", action="store_true", help="also time the parts of an update")
    parser.add_argument(
        "--duration", type=float, help="send batches for this many seconds (overrides --batches)"
    )
    parser.add_argument(
        "--skill-updates",
        action="store_true",
        help="opt-in skill-only updates between full fits (items refitted in the background)",
    )
    parser.add_argument(
        "--no-nuts", action="store_true", help="no scheduled NUTS refits (on by default)"
    )
    parser.add_argument(
        "--cell-effect",
        action="store_true",
        help="opt-in model with the prompt-by-comparison effect (EVALSET_CELL_EFFECT=true)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from adaptive.estimation.snapshot import FULL
    from services.runtime.state import ServiceState
    from services.settings import Settings
    from services.store import repository as repo

    num_systems = 2
    while num_systems * (num_systems - 1) // 2 < args.comparisons:
        num_systems += 1
    tmp = tempfile.TemporaryDirectory()
    url = args.database_url or f"sqlite:///{Path(tmp.name) / 'fresh.db'}"
    settings = Settings(
        database_url=url,
        nuts=not args.no_nuts,
        poll_seconds=3600,
        skill_updates=args.skill_updates,
        cell_effect=args.cell_effect,
    )
    state = ServiceState.create(settings)
    compiles = watch_compiles()
    project = f"fresh-{int(time.time())}"
    key = (project, "overall")
    t = time.perf_counter()
    with state.store.write() as conn:
        repo.create_project(
            conn=conn, project_id=project, name=project, dimensions=[{"dimension_id": "overall"}]
        )
        repo.upsert_systems(
            conn=conn,
            project_id=project,
            systems=[{"system_id": f"sys{i:02d}"} for i in range(num_systems)],
        )
        repo.upsert_prompts(
            conn=conn,
            project_id=project,
            prompts=[{"prompt_id": f"prompt{p:04d}"} for p in range(args.prompts)],
        )
    rows = simulate(args.judgments, num_systems, args.comparisons, args.prompts, args.seed)
    for start in range(0, len(rows), 10_000):
        with state.store.write() as conn:
            repo.add_judgments(
                conn=conn, project_id=project, judgments=rows[start : start + 10_000]
            )
    preload_s = time.perf_counter() - t

    refresher = state.refresher
    assert refresher is not None
    t = time.perf_counter()
    state.start()  # catches up: the first (cold, compiling) fit of the preloaded judgments
    time.sleep(0.2)
    refresher.wait_idle(3600)
    first_fit_s = time.perf_counter() - t
    # one more warm update of the same shape so the measured ones are all warm
    extra = simulate(args.batch, num_systems, args.comparisons, args.prompts, args.seed, len(rows))
    with state.store.write() as conn:
        result = repo.add_judgments(conn=conn, project_id=project, judgments=extra)
    state.notify(project, result.dimensions, result.last_seq)
    time.sleep(0.2)
    refresher.wait_idle(3600)
    refresher.freshness.clear()
    refresher.events.clear()
    published = record_publishes(refresher)

    ingest: list[float] = []
    accepted: list[tuple[float, int]] = []  # (wall time, last_seq) of each batch
    next_at = time.monotonic()
    offset = len(rows) + args.batch
    batches = args.batches if args.duration is None else int(args.duration / args.interval)
    for i in range(batches):
        batch = simulate(
            args.batch,
            num_systems,
            args.comparisons,
            args.prompts,
            args.seed,
            offset + i * args.batch,
        )
        t0 = time.perf_counter()
        with state.store.write() as conn:
            result = repo.add_judgments(conn=conn, project_id=project, judgments=batch)
        state.notify(project, result.dimensions, result.last_seq)
        accepted.append((time.time(), result.last_seq))
        ingest.append(time.perf_counter() - t0)
        next_at += args.interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    time.sleep(0.2)
    refresher.wait_idle(3600)
    fresh = [f for f, _ in refresher.freshness]
    covered = sum(1 for f in fresh if f <= 10.0)
    updates = [e.seconds for e in refresher.events if e.kind == "published" and e.method != FULL]
    report = {
        "judgments_preloaded": args.judgments,
        "comparisons": args.comparisons,
        "prompts": args.prompts,
        "systems": num_systems,
        "cell_effect": args.cell_effect,
        "fast_updates": "skills (items refreshed in the background)"
        if args.skill_updates
        else "full (items included)",
        "batch": args.batch,
        "batches": batches,
        "interval_s": args.interval,
        "preload_s": round(preload_s, 1),
        "first_fit_s_incl_compile": round(first_fit_s, 1),
        "freshness": pct(fresh),
        "freshness_max_s": round(max(fresh), 2) if fresh else None,
        "batches_fresh_within_10s": f"{covered} of {len(fresh)}",
        "fast_update_wall": pct(updates),
        "snapshots_published": len(updates),
        "items_refreshes": pct([e.seconds for e in refresher.events if e.kind == "items"]),
        "ingest_transaction": pct(ingest),
        "failed_events": [e.detail for e in refresher.events if e.kind == "failed"],
        "nuts_refits": pct([e.seconds for e in refresher.events if e.method == FULL]),
        "events": sorted({f"{e.kind}/{e.method}" for e in refresher.events}),
        # the scheduled checks: a full refit against the live snapshot (/health's checks)
        "compared": [json.loads(e.detail) for e in refresher.events if e.kind == "compared"],
        # the slow ones, in order: what a batch waited for (a compile shows here)
        "updates_over_5s": [
            (e.kind, e.num_judgments, round(e.seconds, 1), e.detail)
            for e in refresher.events
            if e.seconds > 5.0
        ],
        # every XLA compile of the run, the first fit's included: the longest three
        "longest_compiles_s": sorted(compiles, key=lambda c: -c[1])[:3],
        "compiles_over_30s": sum(1 for _, sec in compiles if sec > 30.0),
        "load_average": os.getloadavg(),
    }
    report["slowest_batches"] = slowest_batches(published, accepted)
    if args.profile:
        report["one_update_profile"] = profile_update(state, key)
    state.stop()
    tmp.cleanup()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
