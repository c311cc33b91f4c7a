"""The Elo leaderboard's rank intervals (``evalset.elo``) on simulated arenas with repeated cells.

Each arena: 5-8 systems with known ratings (``--truth spread``: uniform on [850, 1150], so some
neighbours are near-ties; ``--truth levels``: each at one of 900, 1000, 1100, so most arenas
have systems of equal rating, as a log's near-identical models), 100 records per system (``--records``); a record is one prompt and one pair of systems, judged by
3 annotators who share the record's latent preference shift u ~ N(0, sigma) (on the logit of
"a beats b"; the same two responses, so their judgments agree more than independent battles
would). Each judgment is a tie with probability 0.3, else a wins with probability
sigmoid(ln(10) (r_a - r_b) / 400 + u). The shift is symmetric, so the true order is the order
of the ratings whatever sigma.

Per arena and bootstrap (``judgment``: battles resampled, the notebook's; ``prompt``: whole
records), at the defaults (1000 resamples, level 0.95): do the rank intervals hold every
system's true rank (all its true ranks, from 1 + the systems rated above it to the number of
systems minus those rated below it, when it shares its rating), how many pairs do they
separate (one's worst rank above the other's best), and is any such pair in the wrong order
(or of equal ratings)? A rank interval can miss a true rank with no such pair (two rating
intervals apart in the wrong order while both rank intervals overlap a third's). sigma = 0 is
the control (independent battles).

Run: ``nice -n 10 .venv/bin/python research/elo_repeated.py --arenas 200`` (about 40 minutes
on two busy cores), and ``... --arenas 200 --truth levels --records 300 --sigmas 3,5``; rows
are appended to ``research/elo/repeated.jsonl`` with the command.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

OUT = Path(__file__).parent / "elo" / "repeated.jsonl"
ANNOTATORS = 3
TIES = 0.3


def arena(
    rng: np.random.Generator, sigma: float, truth_kind: str = "spread", per_system: int = 100
) -> tuple[pl.DataFrame, np.ndarray]:
    """One arena's judgments and its true ratings (system ``s{i}`` has ``truth[i]``)."""
    p = int(rng.integers(5, 9))
    if truth_kind == "levels":
        truth = rng.choice([900.0, 1000.0, 1100.0], p)
    else:
        truth = rng.uniform(850.0, 1150.0, p)
    records = per_system * p
    a = rng.integers(0, p, records)
    b = (a + rng.integers(1, p, records)) % p
    shift = rng.normal(0.0, sigma, records) if sigma > 0 else np.zeros(records)
    logit = np.log(10.0) * (truth[a] - truth[b]) / 400.0 + shift
    p_a = np.repeat(1.0 / (1.0 + np.exp(-logit)), ANNOTATORS)
    n = records * ANNOTATORS
    tie = rng.random(n) < TIES
    a_wins = rng.random(n) < p_a
    winner = np.where(tie, "tie", np.where(a_wins, "a", "b"))
    record = np.repeat(np.arange(records), ANNOTATORS)
    frame = pl.DataFrame(
        {
            "item_id": [f"r{r}" for r in record],
            "system_a": [f"s{i}" for i in np.repeat(a, ANNOTATORS)],
            "system_b": [f"s{i}" for i in np.repeat(b, ANNOTATORS)],
            "annotator_id": [f"h{k}" for k in np.tile(np.arange(ANNOTATORS), records)],
            "winner": winner.tolist(),
        }
    )
    return frame, truth


def judge(board: pl.DataFrame, truth: np.ndarray) -> tuple[bool, int, int]:
    """(every true rank held, pairs separated, separated pairs in the wrong order)."""
    rows = {r["system"]: r for r in board.iter_rows(named=True)}
    rating = {f"s{i}": truth[i] for i in range(len(truth))}
    best = {s: 1 + int((truth > v).sum()) for s, v in rating.items()}
    worst = {s: len(truth) - int((truth < v).sum()) for s, v in rating.items()}
    held = all(r["rank_best"] <= best[s] and worst[s] <= r["rank_worst"] for s, r in rows.items())
    separated = wrong = 0
    for s, r in rows.items():
        for t, q in rows.items():
            if r["rank_worst"] < q["rank_best"]:  # s separated above t
                separated += 1
                wrong += int(rating[s] <= rating[t])
    return held, separated, wrong


def design_effect(frame: pl.DataFrame) -> float:
    """1 + (annotators - 1) x the intra-record correlation of the signed judgment (+1 a,
    -1 b, 0 tie) about its pair's mean: how many independent battles a record is worth, inverted
    (the bundled logs' cells: 1.35-3.9)."""
    y = frame["winner"].replace_strict({"a": 1.0, "b": -1.0, "tie": 0.0}).to_numpy()
    pair = (frame["system_a"] + "|" + frame["system_b"]).to_numpy()
    _, inverse = np.unique(pair, return_inverse=True)
    mean = np.bincount(inverse, y) / np.bincount(inverse)
    r = (y - mean[inverse]).reshape(-1, ANNOTATORS)
    within = r.var(axis=1, ddof=1).mean()
    between = r.mean(axis=1).var(ddof=1) - within / ANNOTATORS
    return 1.0 + (ANNOTATORS - 1) * max(between, 0.0) / (between + within)


def run(
    sigma: float, arenas: int, seed: int, truth_kind: str = "spread", per_system: int = 100
) -> list[dict]:
    import evalset

    rng = np.random.default_rng(seed)
    tally = {b: {"held": 0, "separated": 0, "wrong": 0, "seconds": 0.0} for b in BOOTSTRAPS}
    effects = []
    for k in range(arenas):
        frame, truth = arena(rng, sigma, truth_kind, per_system)
        effects.append(design_effect(frame))
        for bootstrap in BOOTSTRAPS:
            start = time.perf_counter()
            board = evalset.elo(frame, seed=k, bootstrap=bootstrap)
            tally[bootstrap]["seconds"] += time.perf_counter() - start
            held, separated, wrong = judge(board, truth)
            tally[bootstrap]["held"] += held
            tally[bootstrap]["separated"] += separated
            tally[bootstrap]["wrong"] += wrong > 0
    command = "nice -n 10 .venv/bin/python " + " ".join(["research/elo_repeated.py", *sys.argv[1:]])
    return [
        {
            "check": "arenas with repeated cells",
            "sigma": sigma,
            "truth": truth_kind,
            "annotators_per_record": ANNOTATORS,
            "ties": TIES,
            "systems": "5-8",
            "records_per_system": per_system,
            "design_effect_mean": round(float(np.mean(effects)), 2),
            "arenas": arenas,
            "seed": seed,
            "bootstrap": b,
            "rounds": 1000,
            "level": 0.95,
            "share_holding_every_true_rank": t["held"] / arenas,
            "separated_pairs_per_arena": t["separated"] / arenas,
            "share_with_a_wrong_separation": t["wrong"] / arenas,
            "seconds_per_board": round(t["seconds"] / arenas, 3),
            "command": command,
        }
        for b, t in tally.items()
    ]


BOOTSTRAPS = ("judgment", "prompt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arenas", type=int, default=300)
    parser.add_argument("--sigmas", default="1.5,3,0", help="record-effect sds, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--truth", choices=["spread", "levels"], default="spread")
    parser.add_argument("--records", type=int, default=100, help="records per system")
    args = parser.parse_args()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    for sigma in (float(s) for s in args.sigmas.split(",")):
        for row in run(sigma, args.arenas, args.seed, args.truth, args.records):
            with open(OUT, "a") as out:
                out.write(json.dumps(row) + "\n")
            print(row, flush=True)


if __name__ == "__main__":
    main()
