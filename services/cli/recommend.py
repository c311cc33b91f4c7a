"""``evalset recommend`` (the next annotation batch) and ``evalset replay`` (effort vs outcome)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from services.cli import CliError
from services.cli.common import FORMATS, dimensions_of, emit, log

TASK_COLUMNS = (
    "task_id",
    "item_id",
    "dimension",
    "prompt",
    "system_first",
    "response_first",
    "system_second",
    "response_second",
    "system_a",
    "system_b",
    "shown_first",
    "expected_information",
    "purpose",
)


# --------------------------------------------------------------------- recommend


def _pairs(text: str | None) -> list[tuple[str, str]]:
    out = []
    for part in (text or "").split(","):
        if part.strip():
            if ":" not in part:
                raise CliError(f"--targets wants SYSTEM_A:SYSTEM_B pairs, got {part!r}")
            a, b = part.split(":", 1)
            out.append((a.strip(), b.strip()))
    return out


def _side_table(path: Path, key: tuple[str, ...], value: str) -> dict:
    import polars as pl

    if not path.exists():
        return {}
    frame = pl.read_csv(path, infer_schema=False)
    if not set(key + (value,)) <= set(frame.columns):
        return {}
    return {tuple(r[:-1]): r[-1] for r in frame.select(*key, value).iter_rows()}


def recommend_from_file(args: argparse.Namespace) -> list[dict]:
    """Fit each dimension of a judgments file (fast path) and recommend a batch."""
    import numpy as np

    from adaptive.cells import build_cells
    from adaptive.data import filter_judgments, read_judgments
    from adaptive.fitting import FitConfig, fit_cells
    from adaptive.recommend import (
        CellState,
        Request,
        adjacent_comparisons,
        recommend,
        snapshot_from_posteriors,
        tier_comparisons,
    )

    judgments = read_judgments(args.data)
    if args.dimension:
        judgments = filter_judgments(judgments, dimensions=args.dimension)
    dims = dimensions_of(judgments)
    folder = Path(args.data).parent
    prompt_text = _side_table(folder / "items.csv", ("item_id",), "prompt")
    responses = _side_table(folder / "responses.csv", ("item_id", "system"), "response")
    if not args.quiet and not prompt_text:
        log(
            f"note: no prompt texts ({folder / 'items.csv'} with columns item_id, prompt); "
            "the prompt column of the tasks is empty"
        )
    if not args.quiet and not responses:
        log(
            f"note: no responses ({folder / 'responses.csv'} with columns item_id, system, "
            "response); the response columns of the tasks are empty"
        )
    prompts = list(dict.fromkeys(judgments["item_id"].to_list()))
    systems = list(dict.fromkeys(judgments["system_a"].to_list() + judgments["system_b"].to_list()))
    config = FitConfig(
        method="fast",
        likelihood="judgment",
        parameterization=args.parameterization,
        num_draws=args.draws,
        seed=args.seed,
    )
    cells, posteriors = [], []
    for dim in dims:
        cd = build_cells(judgments, dimension=dim)
        if not args.quiet:
            log(f"fitting {dim!r}: {cd.num_comparisons} comparisons, {cd.num_judgments} judgments")
        cells.append(cd)
        posteriors.append(fit_cells(cd, config))
    snapshot, maps = snapshot_from_posteriors(
        posteriors, cells, prompts=prompts, systems=systems, version=0, seed=args.seed
    )
    comp_index = {name: i for i, name in enumerate(maps["comparisons"])}
    num_c, num_p = snapshot.num_comparisons, snapshot.num_prompts
    prompt_index = {p: i for i, p in enumerate(prompts)}

    # cell state: shown-first counts from the data (when recorded), annotator's cells
    state = CellState.open(num_c, num_p)
    exclude = np.zeros((num_c, num_p), bool) if args.annotator else None
    oriented = []
    for row in judgments.iter_rows(named=True):
        key = (row["dimension"], row["system_a"], row["system_b"])
        flipped = key not in comp_index
        c = comp_index[(row["dimension"], row["system_b"], row["system_a"]) if flipped else key]
        oriented.append((c, prompt_index[row["item_id"]], flipped, row))
    for c, p, flipped, row in oriented:
        shown = row.get("shown_first")
        if shown in ("a", "b"):
            side_a = (shown == "a") != flipped
            (state.shown_a if side_a else state.shown_b)[c, p] += 1
        if exclude is not None and row["annotator_id"] == args.annotator:
            exclude[c, p] = True

    targets = None
    named = _pairs(args.targets)
    if named:
        targets = []
        for a, b in named:
            hits = [i for (d, x, y), i in comp_index.items() if {x, y} == {a, b} and (d in dims)]
            if not hits:
                raise CliError(f"no comparison of {a!r} and {b!r} in the data")
            targets += hits
    if args.adjacent:
        targets = list(targets or []) + list(adjacent_comparisons(snapshot))
    if args.tier:
        members = [s.strip() for s in args.tier.split(",") if s.strip()]
        unknown = sorted(set(members) - set(systems))
        if unknown:
            raise CliError(f"unknown systems in --tier: {unknown}")
        idx = [systems.index(s) for s in members]
        targets = list(targets or []) + list(tier_comparisons(snapshot, idx))
    request = Request(
        size=args.size,
        targets=tuple(sorted(set(targets))) if targets is not None else None,
        exclude=exclude,
        explore_share=args.explore_share,
        max_per_cell=1 if args.annotator else args.max_per_cell,
    )
    batch, info = recommend(args.seed, snapshot, state, request)
    if not args.quiet:
        log(
            f"{len(batch)} tasks from {info.num_candidates} candidate cells; "
            f"{int(info.decided.sum())}/{num_c} comparisons decided (P(B better) beyond "
            f"0.995/0.005); target variance {info.target_variance_before:.4f} -> "
            f"{info.target_variance_after:.4f} (fantasised)"
        )
    rows = []
    for k in range(len(batch)):
        c, p = int(batch.comparison[k]), int(batch.prompt[k])
        dim, a, b = maps["comparisons"][c]
        item = prompts[p]
        first, second = (a, b) if batch.shown_first[k] == 0 else (b, a)
        rows.append(
            {
                "task_id": f"t{k + 1:05d}",
                "item_id": item,
                "dimension": dim,
                "prompt": prompt_text.get((item,), ""),
                "system_first": first,
                "response_first": responses.get((item, first), ""),
                "system_second": second,
                "response_second": responses.get((item, second), ""),
                "system_a": a,
                "system_b": b,
                "shown_first": "a" if batch.shown_first[k] == 0 else "b",
                "expected_information": float(batch.expected_gain[k]),
                "purpose": "calibration" if batch.explore[k] else "information",
            }
        )
    return rows


def recommend_from_project(args: argparse.Namespace) -> list[dict]:
    """Ask a running service for the next batch."""
    import httpx

    body = {"size": args.size}
    if args.annotator:
        body["annotator_id"] = args.annotator
    if args.dimension:
        body["dimensions"] = args.dimension
    if args.targets:
        body["targets"] = [list(p) for p in _pairs(args.targets)]
    if args.idempotency_key:
        body["idempotency_key"] = args.idempotency_key
    url = f"{args.url.rstrip('/')}/projects/{args.project}/next-batch"
    token = args.token or os.environ.get("EVALSET_TOKEN")
    if not token:
        raise CliError("--project needs the project's token: --token or EVALSET_TOKEN")
    headers = {"Authorization": f"Bearer {token}"}
    try:
        response = httpx.post(url, json=body, headers=headers, timeout=60.0)
    except httpx.HTTPError as exc:
        raise CliError(f"cannot reach the service at {args.url}: {exc}") from exc
    if response.status_code >= 400:
        raise CliError(f"the service answered {response.status_code}: {response.text[:200]}")
    payload = response.json()
    if not args.quiet:
        log(f"lease {payload.get('lease_id')} expires at {payload.get('expires_at')}")
    rows = []
    for k, cell in enumerate(payload.get("cells", [])):
        first = cell["system_a"] if cell["shown_first"] == "a" else cell["system_b"]
        second = cell["system_b"] if cell["shown_first"] == "a" else cell["system_a"]
        rows.append(
            {
                "task_id": f"t{k + 1:05d}",
                "item_id": cell["item_id"],
                "dimension": cell["dimension"],
                "prompt": cell.get("prompt", ""),
                "system_first": first,
                "response_first": "",
                "system_second": second,
                "response_second": "",
                "system_a": cell["system_a"],
                "system_b": cell["system_b"],
                "shown_first": cell["shown_first"],
                "expected_information": cell.get("expected_information"),
                "purpose": cell.get("purpose", "information"),
            }
        )
    return rows


def run_recommend(args: argparse.Namespace) -> int:
    if (args.data is None) == (args.project is None):
        raise CliError("give exactly one of --data FILE or --project P")
    if args.size <= 0:
        raise CliError("--size must be positive")
    rows = recommend_from_file(args) if args.data else recommend_from_project(args)
    emit(rows, args.format, columns=TASK_COLUMNS)
    return 0


# ------------------------------------------------------------------------ replay


def run_replay(args: argparse.Namespace) -> int:
    import numpy as np

    from adaptive.cells import build_cells
    from adaptive.data import read_judgments
    from adaptive.replay import (
        POLICIES,
        Fitter,
        ReplayConfig,
        curve,
        headline,
        replay,
        verdicts,
    )

    policies = []
    for part in args.policy or ["adaptive", "uniform", "round_robin", "arena"]:
        policies += [p.strip() for p in part.split(",") if p.strip()]
    unknown = sorted(set(policies) - set(POLICIES))
    if unknown:
        raise CliError(f"unknown policies {unknown}; expected some of {list(POLICIES)}")
    judgments = read_judgments(args.data)
    dims = args.dimension or dimensions_of(judgments)
    config = ReplayConfig(
        batch_size=args.batch_size,
        budget=args.budget,
        parameterization=args.parameterization,
        thresholds=args.thresholds,
        num_draws=args.draws,
        explore_share=args.explore_share,
        warm_start=args.warm_start,
    )
    rows, heads, raw = [], [], []
    for dim in dims:
        cells = build_cells(judgments, dimension=dim)
        fitter = Fitter(cells, config)
        reference = verdicts(fitter.fit(np.ones(cells.num_judgments, bool)))
        total = min(config.budget or cells.num_judgments, cells.num_judgments)
        if not args.quiet:
            log(
                f"{dim}: {cells.num_comparisons} comparisons, {cells.num_judgments} judgments; "
                f"{int((reference != 0).sum())} significant on the full log"
            )
        for policy in policies:
            traces = []
            for seed in range(args.seed, args.seed + args.seeds):
                trace = replay(seed, cells, policy, reference, config, fitter=fitter)
                traces.append(trace)
                raw.append(
                    {
                        "dimension": dim,
                        "policy": policy,
                        "seed": seed,
                        "judgments": trace.judgments.tolist(),
                        "agreement": trace.agreement.tolist(),
                        "num_decided": trace.num_decided.tolist(),
                    }
                )
                if not args.quiet:
                    log(
                        f"  {policy} seed {seed}: {trace.judgments[-1]} judgments used, "
                        f"final agreement {trace.agreement[-1]:.3f}"
                    )
            for row in curve(traces, config.batch_size, total):
                rows.append({"dimension": dim, **row})
            heads.append({"dimension": dim, **headline(traces, args.level, total)})
        if args.raw:
            Path(args.raw).write_text(json.dumps(raw))
    emit(rows, args.format)
    if args.headline:
        Path(args.headline).write_text(json.dumps(heads, indent=1))
    if not args.quiet:
        from services.cli.common import render

        log(f"judgments to reach {args.level:.0%} agreement (and keep it), over seeds:")
        log(render(heads, "table"))
    if args.plot:
        plot_curves(rows, heads, args.plot)
    return 0


def plot_curves(rows: list[dict], heads: list[dict], path: str) -> None:
    """Agreement vs judgments, one panel per dimension, mean +- sd over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = list(dict.fromkeys(r["dimension"] for r in rows))
    fig, axes = plt.subplots(1, len(dims), figsize=(5.5 * len(dims), 4), squeeze=False)
    for ax, dim in zip(axes[0], dims):
        for policy in dict.fromkeys(r["policy"] for r in rows if r["dimension"] == dim):
            sel = [r for r in rows if r["dimension"] == dim and r["policy"] == policy]
            x = [r["judgments"] for r in sel]
            m = [r["agreement_mean"] for r in sel]
            s = [r["agreement_sd"] for r in sel]
            (line,) = ax.plot(x, m, label=policy)
            ax.fill_between(
                x,
                [a - b for a, b in zip(m, s)],
                [a + b for a, b in zip(m, s)],
                alpha=0.15,
                color=line.get_color(),
            )
        ax.axhline(0.95, color="grey", linestyle=":", linewidth=1)
        ax.set_title(dim)
        ax.set_xlabel("judgments used")
        ax.set_ylabel("agreement with full-data verdicts")
        ax.set_ylim(0, 1.02)
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------- register


def register(sub) -> None:
    p = sub.add_parser(
        "recommend",
        help="the next annotation batch: cells that most reduce the uncertainty of undecided comparisons",
        description=(
            "Recommend the next batch of (prompt, system pair, dimension) tasks. With --data the "
            "judgments file is fitted here (fast path) and the batch written as one row per task "
            "with the prompt and both responses in display order (items.csv / responses.csv "
            "next to the file supply the texts). With --project a running service is asked "
            "(POST /projects/P/next-batch) and the batch is leased."
        ),
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--data", help="judgments file (CSV, JSONL or Parquet)")
    source.add_argument("--project", help="a served project id")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="service URL (with --project)")
    p.add_argument("--token", help="the project's API token (default: $EVALSET_TOKEN)")
    p.add_argument("--idempotency-key", help="repeat a request safely (with --project)")
    p.add_argument("--size", type=int, required=True, help="tasks in the batch")
    p.add_argument("--annotator", help="never give this annotator a cell they already judged")
    p.add_argument("--dimension", action="append", help="only this dimension (repeatable)")
    p.add_argument("--targets", help="comparisons that matter: A:B,C:D (default: the undecided)")
    p.add_argument("--adjacent", action="store_true", help="target leaderboard neighbours")
    p.add_argument("--tier", help="target the comparisons within this tier: SYS1,SYS2,...")
    p.add_argument("--explore-share", type=float, default=0.1, help="share spent on calibration")
    p.add_argument("--max-per-cell", type=int, default=1, help="tasks of one cell per batch")
    p.add_argument("--parameterization", choices=["comparison", "system"], default="comparison")
    p.add_argument("--draws", type=int, default=1000, help="Laplace draws of the fit")
    p.add_argument("--format", choices=list(FORMATS), default="csv")
    p.add_argument("--seed", type=int, default=0, help="same data, request and seed: same batch")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run_recommend)

    r = sub.add_parser(
        "replay",
        help="replay a fully logged campaign: judgments each policy needs to reach the full-data verdicts",
        description=(
            "Leopard/White replay: each policy may only ask for judgments that exist in the log; "
            "after every batch the model is re-fitted (MAP + Laplace, warm start) and the share "
            "of comparisons whose verdict (sign and 95%-interval significance) matches the "
            "full-data verdict is recorded. Output: agreement curve per policy (mean and sd over "
            "seeds); the headline (judgments to reach --level) goes to stderr and --headline."
        ),
    )
    r.add_argument("--data", required=True, help="judgments file (CSV, JSONL or Parquet)")
    r.add_argument("--dimension", action="append", help="only this dimension (repeatable)")
    r.add_argument(
        "--policy",
        action="append",
        help="adaptive, uniform, round_robin, arena (repeatable or comma-separated; default all)",
    )
    r.add_argument("--seeds", type=int, default=20, help="replays per policy")
    r.add_argument("--seed", type=int, default=0, help="first seed")
    r.add_argument("--budget", type=int, help="stop after this many judgments")
    r.add_argument("--batch-size", type=int, default=200, help="judgments per batch")
    r.add_argument("--parameterization", choices=["comparison", "system"], default="comparison")
    r.add_argument(
        "--thresholds",
        choices=["free", "symmetric"],
        default="free",
        help="free (paper) or symmetric (theta = 0 means no preference)",
    )
    r.add_argument("--draws", type=int, default=1000, help="Laplace draws per fit")
    r.add_argument("--explore-share", type=float, default=0.1)
    r.add_argument(
        "--warm-start",
        action="store_true",
        help="start each re-fit from the previous mode (faster; the MAP may differ from a cold fit)",
    )
    r.add_argument("--level", type=float, default=0.95, help="agreement level of the headline")
    r.add_argument("--plot", help="write the curves to this PNG")
    r.add_argument("--headline", help="write the headline (JSON) to this file")
    r.add_argument("--raw", help="write every trace (JSON) to this file")
    r.add_argument("--format", choices=list(FORMATS), default="table")
    r.add_argument("--quiet", action="store_true")
    r.set_defaults(func=run_replay)
