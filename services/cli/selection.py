"""``evalset loco`` and ``evalset prune``: prompt selection and pruning of the evaluation set."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from adaptive.prompts.loco_data import (
    DEFAULT_ABILITY,
    DEFAULT_GRID,
    DEFAULT_POLICIES,
    DEFAULT_RANDOM,
    DEFAULT_TIER_ESTIMATE,
    DEFAULT_TIER_INFORMATION,
    DEFAULT_TIERS,
)
from adaptive.prompts.redundancy import DEFAULT_FDR, DEFAULT_THRESHOLD
from services.cli.common import FORMATS, add_data_args, dimensions_of, emit, log, progress_bar

LOCO_COLUMNS = (
    "dimension",
    "policy",
    "k",
    "se_mean",
    "se_sd",
    "n_folds",
    "draw_sd",
    "se_ratio",
    "paired_ratio",
    "rmse_vs_full",
    "heldout_se_ratio",
)
PRUNE_COLUMNS = (
    "dimension",
    "item_id",
    "tier",
    "kept",
    "reason",
    "rank",
    "information",
    "se_ratio",
)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from exc
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("expected positive integers")
    return values


def _name_list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _fdr(text: str) -> float | None:
    return None if text.lower() in {"none", "off", ""} else float(text)


def _add_selection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tiers",
        type=int,
        default=DEFAULT_TIERS,
        help=f"number of model tiers (default {DEFAULT_TIERS})",
    )
    p.add_argument(
        "--tier-sizes",
        type=_int_list,
        help="systems per tier, best first (default: equal split by ability rank)",
    )
    p.add_argument(
        "--ability",
        choices=["lstsq", "mean"],
        default=DEFAULT_ABILITY,
        help="system ability for tiers: least-squares skills (default) or plain mean of signed Delta",
    )
    p.add_argument(
        "--redundancy-threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"group prompts whose judgments correlate above this (default {DEFAULT_THRESHOLD})",
    )
    p.add_argument(
        "--redundancy-fdr",
        type=_fdr,
        default=DEFAULT_FDR,
        help="... and whose correlation is significant at this false discovery rate ('none' to skip)",
    )
    p.add_argument("--no-redundancy", action="store_true", help="do not drop redundant prompts")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _selection_options(args: argparse.Namespace) -> dict[str, Any]:
    """LocoConfig and PruneConfig fields from the options both commands take (tiers,
    redundancy, seed)."""
    return {
        "num_tiers": args.tiers,
        "tier_sizes": args.tier_sizes,
        "ability_method": args.ability,
        "redundancy_threshold": None if args.no_redundancy else args.redundancy_threshold,
        "redundancy_fdr": args.redundancy_fdr,
        "seed": args.seed,
    }


def _workers(requested: int | None) -> int:
    """``--workers``, by default every CPU when Ray is installed and 1 (serial) when not."""
    from importlib.util import find_spec

    has_ray = find_spec("ray") is not None
    if requested is None:
        return (os.cpu_count() or 1) if has_ray else 1
    if requested > 1 and not has_ray:
        from services.cli.errors import CliError

        raise CliError(
            f"--workers {requested} runs the folds on Ray, which is not installed: "
            "pip install 'adaptive-evalset[ray]' (or --workers 1)"
        )
    return max(1, requested)


def _prefixed(prefix: str) -> Any:
    """:func:`log` with ``prefix`` before each message."""
    return lambda message: log(prefix + message)


def run_loco_command(args: argparse.Namespace) -> int:
    from adaptive.prompts.loco import LocoConfig
    from evalset.files import read_judgments
    from evalset.loco import loco_dimensions, loco_folds, loco_rows
    from services.cli.analysis import fit_cache

    config = LocoConfig(
        grid=args.grid,
        policies=args.policies,
        num_random=args.num_random,
        tier_estimate=args.tier_estimate,
        tier_information=args.tier_information,
        **_selection_options(args),
    )
    workers = _workers(args.workers)
    rows: list[dict[str, Any]] = []
    judgments = read_judgments(args.data)
    cache = fit_cache()
    for dim, cells, data in loco_dimensions(judgments, dimensions_of(judgments, args.dimension)):
        if not args.quiet:
            where = "serially" if workers == 1 else f"on Ray with {workers} workers"
            log(
                f"loco {dim!r}: {data.num_comparisons} folds ({data.num_prompts} prompts) {where}; "
                "training fits: fast MAP + Laplace"
            )
        start = time.perf_counter()
        with progress_bar(f"loco {dim!r} folds", quiet=args.quiet) as progress:
            results, info = loco_folds(
                data,
                config,
                workers=workers,
                progress=progress,
                cache=cache,
                log=None if args.quiet else _prefixed(f"loco {dim!r}: "),
            )
        if not args.quiet:
            nodes = len(set(info.node_ids))
            log(f"loco {dim!r}: {time.perf_counter() - start:.1f} s on {nodes} node(s)")
        rows += loco_rows(dim, cells, results, config)
    if args.plot:
        from evalset.plots import plot_se_curve

        plot_se_curve(
            [r for r in rows if r["dimension"] == rows[0]["dimension"]],
            args.plot,
            title=f"LOCO on {os.path.basename(os.path.dirname(os.path.abspath(args.data)))}",
        )
        if not args.quiet:
            log(f"wrote {args.plot}")
    emit(rows, args.format, columns=LOCO_COLUMNS if args.format != "json" else None)
    if not args.quiet and args.format == "table":
        log(
            "se_mean: mean over folds of the held-out ability's posterior sd with the top-k prompts; "
            "draw_sd: spread over random draws; se_ratio: se_mean / all-prompts se_mean; "
            "heldout_se_ratio: the top-k's SNR ratio on the held-out comparison's own judgments "
            "(median over the clearly signed folds)"
        )
    return 0


def run_prune_command(args: argparse.Namespace) -> int:
    from adaptive.prompts.pruning import PruneConfig
    from evalset.files import read_judgments
    from evalset.pruning import prune_judgments
    from services.cli.analysis import fit_cache

    config = PruneConfig(
        keep=args.keep,
        target_se_ratio=args.target_se_ratio,
        rank=args.rank,
        **_selection_options(args),
    )
    rows = prune_judgments(
        read_judgments(args.data),
        config,
        dimension=args.dimension,
        log=None if args.quiet else log,
        cache=fit_cache(),
    )
    if args.information:
        import evalset
        from evalset.item_fit import information_curve

        judgments = read_judgments(args.data)
        curves = []
        for dim in sorted({r["dimension"] for r in rows}):
            fit = evalset.fit(judgments, dimension=dim, method="fast", seed=args.seed)
            kept = sorted({r["item_id"] for r in rows if r["dimension"] == dim and r["kept"]})
            for name, prompts in (("all", None), ("kept", kept)):
                curve = information_curve(fit, prompts=prompts, seed=args.seed)
                curves += [{"prompts": name, **row} for row in curve.to_dicts()]
        emit(curves, args.format)
        return 0
    if args.format == "list":
        print("\n".join(kept_list(rows)))
        return 0
    emit(rows, args.format, columns=PRUNE_COLUMNS if args.format != "json" else None)
    return 0


def kept_list(rows: list[dict[str, Any]]) -> list[str]:
    """The prompts kept in some tier (the union over tiers), per dimension, by name.

    With one dimension a line is the prompt id, otherwise ``dimension<TAB>prompt id``.
    """
    kept = sorted({(r["dimension"], r["item_id"]) for r in rows if r["kept"]})
    several = len({d for d, _ in kept}) > 1
    return [f"{d}\t{p}" if several else p for d, p in kept]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _register_loco(sub)
    _register_prune(sub)


def _register_loco(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "loco",
        help="leave-one-comparison-out SE vs number of prompts per selection policy (paper Fig. 2)",
    )
    add_data_args(p)
    p.add_argument(
        "--grid",
        type=_int_list,
        default=DEFAULT_GRID,
        help=f"numbers of prompts k (default {','.join(map(str, DEFAULT_GRID))})",
    )
    p.add_argument(
        "--policies",
        type=_name_list,
        default=DEFAULT_POLICIES,
        help=f"random, prompt, prompt_model, discrimination (default {','.join(DEFAULT_POLICIES)})",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="parallel folds on Ray (local, or the cluster at RAY_ADDRESS); 1 = serial "
        "(default: the number of CPUs, 1 without Ray)",
    )
    p.add_argument(
        "--num-random",
        type=int,
        default=DEFAULT_RANDOM,
        help=f"random draws per fold (default {DEFAULT_RANDOM})",
    )
    p.add_argument("--plot", help="write the SE-vs-k figure to this PNG")
    p.add_argument(
        "--tier-estimate",
        choices=["global", "tier", "linked"],
        default=DEFAULT_TIER_ESTIMATE,
        help="prompt_model: estimate the held-out ability with the global item parameters "
        "(default; one ability scale for every policy), the tier's (the paper's wording; "
        "the tier's own scale), or the tier's linked to the global scale (mean-sigma)",
    )
    p.add_argument(
        "--tier-information",
        choices=["refit", "located"],
        default=DEFAULT_TIER_INFORMATION,
        help="prompt_model: rank by information from item parameters re-estimated inside "
        "the tier (default; the paper's procedure), or from the global parameters evaluated "
        "at the tier's abilities (no tier fit)",
    )
    _add_selection_args(p)
    p.set_defaults(func=run_loco_command)


def _register_prune(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "prune",
        help="kept and dropped prompts per model tier, with reasons and the SE ratio on fresh "
        "judgments",
    )
    add_data_args(p, formats=(*FORMATS, "list"))
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--keep", type=int, help="keep this many prompts per tier")
    group.add_argument(
        "--target-se-ratio",
        type=float,
        help="keep the fewest prompts whose SE ratio vs the full set on fresh judgments "
        "(predicted, the selection's luck shrunk away) is within this ratio",
    )
    p.add_argument(
        "--rank",
        choices=["shared", "information"],
        default="shared",
        help="rank a tier's prompts by their effect shared by the tier's comparisons, shrunk "
        "for noise (default: better on fresh judgments and new systems in the held-out "
        "check, docs/selection.md), or by Fisher information at the tier's abilities (the "
        "paper's ranking)",
    )
    _add_selection_args(p)
    p.add_argument(
        "--information",
        action="store_true",
        help="print the test information curve over theta of every prompt and of the kept ones "
        "(the default model's fit of all judgments; the per-tier SEs above come from per-tier "
        "fits) instead of the per-prompt rows",
    )
    p.set_defaults(func=run_prune_command)
