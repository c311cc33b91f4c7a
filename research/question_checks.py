"""Questions (top-k, ranking, versus) on simulated campaigns with known truth and on the logs.

Each row replays one policy on fresh simulated campaigns (one per seed, the same campaigns for
every policy; :func:`adaptive.simulation.replay_questions.system_campaign`) under the
product's decision rule (Bonferroni at 0.05 over the question's family), reading the answer
after every batch of 100 judgments until it is settled or the log runs out:

* ``wrong_answer_rate``: campaigns in which any statement, at any look, contradicted the truth
  (the guarantee: at most the level, 0.05);
* ``judgments_mean`` and ``answered_share``; ``ratio_to_uniform`` and ``ratio_to_oracle``
  (policies in the same setting; the oracle knows the true order and serves only the pairs
  the true answer needs); ``lower_bound``: the judgments any policy needs in expectation to
  state the true answer at the level (Kaufmann, Cappé & Garivier 2016;
  :func:`adaptive.simulation.replay_questions.lower_bound`).

Settings (strengths s; comparison (a, b) has true Δ = s_b - s_a; 25% ties, prompt spread 0.5,
one judgment per cell):

* ``null``: 6 systems, all equal (no statement is true but "not separated");
* ``top-gap-G``: 6 systems, the best k = 2 spaced 0.1 apart, a gap G below the second, the
  rest spaced 0.1 apart (G = 0.02, 0.1, 0.3);
* ``spread``: 6 systems spaced 0.1 apart (a ranking that can be separated);
* ``near-tie``: 6 systems spaced 0.1 apart but the top two 0.01 apart;
* ``late``: ``spread``'s first five and a sixth, the best (0.35), whose comparisons open only
  after 2,000 judgments (a system entering late; every pair is in the family from the start);
* ``versus``: a new system and three references, Δ(new vs r) = 0.15, -0.05, -0.25 (4 systems);
  ``versus-close``: the new system 0.24-0.3 above three references within 0.06 of each other;
  ``versus-null``: the four equal.

``--logs`` replays the same questions on bundled logs instead (the log itself, or fresh
campaigns simulated from a fit to it with ``--semi-synthetic --prompts-factor K``, where the
oracle and the lower bound apply).

Run (the rows go to ``research/questions/checks.jsonl``, appended with their command):

    nice python research/question_checks.py --settings null --questions top-k:1 top-k:2 ranking \
        --policies adaptive --campaigns 500
    nice python research/question_checks.py --settings top-gap-0.1 spread near-tie \
        --questions top-k:1 top-k:2 ranking --policies adaptive uniform round_robin oracle \
        --campaigns 50
    nice python research/question_checks.py --settings versus --questions versus:r1,r2,r3 \
        all-pairs --policies adaptive uniform --campaigns 100
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from adaptive.simulation.campaigns import system_campaign
from adaptive.simulation.replay import ReplayConfig, replay, summarize_replays
from adaptive.stopping.questions import Question
from adaptive.stopping.rule import DecisionRule

OUT = Path(__file__).parent / "questions" / "checks.jsonl"


def strengths(setting: str) -> tuple[list[float], list[str]]:
    """The systems' strengths and names of a setting."""
    if setting == "null":
        return [0.0] * 6, []
    if setting.startswith("top-gap-"):
        gap = float(setting.removeprefix("top-gap-"))
        top = [gap + 0.1, gap]
        return [*top, 0.0, -0.1, -0.2, -0.3], []
    if setting == "spread":
        return [0.25, 0.15, 0.05, -0.05, -0.15, -0.25], []
    if setting == "near-tie":
        return [0.26, 0.25, 0.15, 0.05, -0.05, -0.15], []
    if setting == "versus":
        return [0.0, -0.15, 0.05, 0.25], ["new", "r1", "r2", "r3"]
    if setting == "late":
        return [0.25, 0.15, 0.05, -0.05, -0.15, 0.35], []
    if setting == "versus-close":
        return [0.3, 0.0, 0.03, 0.06], ["new", "r1", "r2", "r3"]
    if setting == "versus-null":
        return [0.0] * 4, ["new", "r1", "r2", "r3"]
    raise ValueError(f"unknown setting {setting!r}")


def run(
    setting: str, question: str, policy: str, campaigns: int, num_prompts: int, batch: int
) -> dict:
    s, names = strengths(setting)
    q = Question.parse(question)
    K = len(s)
    pairs = K * (K - 1) // 2
    systems = tuple(names) or tuple(f"s{i}" for i in range(K))
    rule = q.rule_for(DecisionRule(family="all-pairs"), systems)
    num_tests = len(rule.pairs) if rule.family == "registered" else pairs
    config = ReplayConfig(batch_size=batch, rule=rule, num_tests=num_tests, question=q)
    if setting == "late":
        pair_a, pair_b = np.triu_indices(K, 1)
        late = tuple(int(c) for c in np.flatnonzero((pair_a == K - 1) | (pair_b == K - 1)))
        config = replace(config, late=late, late_after=2000)
    traces, logs = [], []
    start = time.perf_counter()
    for seed in range(campaigns):
        log = system_campaign(
            np.random.default_rng([seed, 7]), s, num_prompts=num_prompts, names=names
        )
        logs.append(log)
        traces.append(replay(seed, log, policy, config))
    row = summarize_replays(traces, logs, rule)
    row.pop("curve", None)
    row.update(needed_check([t.answer for t in traces]))
    return {
        "setting": setting,
        "question": question,
        "strengths": s,
        "prompts_per_pair": num_prompts,
        "batch": batch,
        "family_size": num_tests,
        "seconds": round(time.perf_counter() - start, 1),
        **row,
    }


def needed_check(answers) -> dict:
    """The ``needed`` an answer printed against the judgments the campaign then spent.

    Per campaign, at its first look with a finite figure and at the look nearest half-way
    to the answer (or to the last look): the judgments spent from that look until
    answered, over the figure printed there. A campaign the log ran out on counts as
    spending more than any figure (inf), so the lucky campaigns are not the only ones
    kept; it is known to have spent more than the figure when the judgments after that
    look already exceed it. Median ratio over campaigns, the share answered within the
    figure (``within``) and the share known to have needed more (``over``).
    """
    found: dict[str, list[tuple[float, float]]] = {"first": [], "half": []}
    for a in answers:
        looks = [(u, n) for u, n in a.needs if np.isfinite(n) and n > 0]
        if not looks:
            continue
        last = looks[-1][0]
        end = a.answered_at if np.isfinite(a.answered_at) else last
        for name, (u, n) in (
            ("first", looks[0]),
            ("half", min(looks, key=lambda look: abs(look[0] - end / 2))),
        ):
            spent = (a.answered_at - u) / n
            found[name].append((spent, spent if np.isfinite(spent) else (last - u) / n))
    row: dict = {"needed_campaigns": len(found["first"])}
    for name, pairs in found.items():
        if pairs:
            spent, at_least = (np.asarray(v) for v in zip(*pairs))
            row[f"needed_ratio_{name}"] = round(float(np.median(spent)), 3)
            row[f"needed_within_{name}"] = round(float(np.mean(spent <= 1.0)), 3)
            row[f"needed_over_{name}"] = round(float(np.mean(at_least > 1.0)), 3)
    return row


LOGS = {
    "mtbench": "data/mtbench/judgments.csv",
    "ai_teacher_test": "data/ai_teacher_test/judgments.csv",
    "chateval_ncm": "data/chateval_ncm/judgments.csv",
}


def run_logs(args: argparse.Namespace, command: str) -> None:
    """The same questions replayed on bundled logs (``--logs``), through evalset.replays."""
    from adaptive.core.data import read_judgments
    from evalset.replays import replay_rows

    root = Path(__file__).resolve().parents[1]
    for name in args.logs:
        judgments = read_judgments(root / LOGS[name])
        for question in args.questions:
            rows = replay_rows(
                judgments,
                policies=args.policies,
                seeds=args.campaigns,
                batch_size=args.batch,
                question=question,
                semi_synthetic=args.semi_synthetic,
                prompts_factor=args.prompts_factor,
            )
            for row in rows:
                row.pop("curve", None)
                row |= {"log": name, "command": command}
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(
                    f"{name:15s} {row['dimension']:14s} {question:12s} {row['policy']:11s} "
                    f"judgments={row['judgments_mean']:.0f} answered={row['answered_share']:.2f} "
                    f"wrong={row['wrong_answers']} x uniform {row['ratio_to_uniform'] or 0:.2f} "
                    f"x oracle {row.get('ratio_to_oracle') or 0:.2f} "
                    f"bound={row.get('lower_bound')} answer={row['answer']!r}",
                    flush=True,
                )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--settings", nargs="+", default=[])
    p.add_argument("--logs", nargs="+", default=[], choices=sorted(LOGS))
    p.add_argument("--semi-synthetic", action="store_true", help="with --logs")
    p.add_argument("--prompts-factor", type=int, default=1, help="with --semi-synthetic")
    p.add_argument("--questions", nargs="+", required=True)
    p.add_argument("--policies", nargs="+", default=["adaptive"])
    p.add_argument("--campaigns", type=int, default=50)
    p.add_argument("--prompts", type=int, default=1500, help="prompts per pair in the log")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    command = "python research/question_checks.py " + " ".join(argv or sys.argv[1:])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    if args.logs:
        run_logs(args, command)
    for setting in args.settings:
        for question in args.questions:
            rows = {}
            for policy in args.policies:
                rows[policy] = run(
                    setting, question, policy, args.campaigns, args.prompts, args.batch
                )
            base = rows.get("uniform", {}).get("judgments_mean")
            oracle = rows.get("oracle", {}).get("judgments_mean")
            for policy, row in rows.items():
                row["ratio_to_uniform"] = row["judgments_mean"] / base if base else None
                row["ratio_to_oracle"] = row["judgments_mean"] / oracle if oracle else None
                row["command"] = command
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
                keys = ("judgments_mean", "answered_share", "wrong_answer_rate", "lower_bound")
                keys += ("needed_ratio_first", "needed_within_first", "needed_over_first")
                shown = " ".join(f"{k}={row[k]:.3g}" for k in keys if row.get(k) is not None)
                ratios = f"x uniform {row['ratio_to_uniform'] or float('nan'):.2f}"
                ratios += f", x oracle {row['ratio_to_oracle'] or float('nan'):.2f}"
                print(
                    f"{setting:12s} {question:14s} {policy:11s} {shown} {ratios} "
                    f"answer={row['answer']!r} ({row['answer_share']:.2f}) {row['seconds']}s",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
