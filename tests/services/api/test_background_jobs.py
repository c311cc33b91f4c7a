"""services.runtime.background.BackgroundJobs: one job per key, and a newer job of the same
question (the key but the judgments seen) drops the queued ones."""

from __future__ import annotations

import threading

from services.runtime.background import BackgroundJobs, Pending


def test_a_newer_job_drops_the_queued_ones_of_its_group_and_keeps_the_running_one():
    jobs = BackgroundJobs()
    release = threading.Event()
    started = threading.Event()
    ran: list[str] = []

    def work(name: str) -> str:
        started.set()
        release.wait(10)
        ran.append(name)
        return name

    def key(seen: int, seed: int = 0) -> tuple:
        return ("p", "overall", seen, "recommend", seed)

    try:
        assert isinstance(jobs.result(key(1), 10, work, "first"), Pending)
        assert started.wait(10)  # running: it cannot be dropped
        assert isinstance(jobs.result(key(2), 20, work, "second"), Pending)
        assert isinstance(jobs.result(key(2, seed=1), 20, work, "seed 1"), Pending)  # another
        assert isinstance(jobs.result(key(3), 30, work, "third"), Pending)
        release.set()
        jobs._pool.shutdown(wait=True)
        assert ran == ["first", "seed 1", "third"]  # "second" was dropped while queued
        assert jobs.result(key(3), 30, work, "third") == "third"
        assert jobs.result(key(1), 10, work, "first") == "first"
        assert key(2) not in jobs._jobs
    finally:
        release.set()
        jobs.shutdown()


def test_a_cancelled_job_reads_as_pending_with_the_newest_finished_answer():
    """A request whose job a newer question cancelled gets a Pending (not CancelledError),
    carrying the newest finished answer to the same question for a page to show."""
    from concurrent.futures import Future

    jobs = BackgroundJobs()
    try:
        older = ("p", "overall", 1, "elo")
        jobs.result(older, 10, lambda: "of 10")  # Pending, or done already
        assert jobs._jobs[older].result(10) == "of 10"
        cancelled: Future = Future()
        cancelled.cancel()
        newer = ("p", "overall", 2, "elo")
        jobs._jobs[newer] = cancelled
        jobs._groups[newer] = (("p", "overall", "elo"), 20)
        got = jobs.result(newer, 20, lambda: "never")
        assert got == Pending(20, previous="of 10", previous_judgments=10)
        other = jobs.result(("p", "overall", 3, "pruning"), 30, lambda: "x")  # another question
        assert other == Pending(30) or other == "x"
    finally:
        jobs.shutdown()


def test_a_job_uses_another_jobs_answer_or_makes_it_and_keeps_it():
    """``shared``: the item-fit job reads the default model's fit when it is done, else fits
    it itself, in place of a fit job queued behind it (fitted once, not twice)."""
    jobs = BackgroundJobs()
    calls: list[int] = []
    release = threading.Event()

    def fit(n: int) -> str:
        calls.append(n)
        return f"fit of {n}"

    def check(n: int) -> str:
        return "check of " + jobs.shared(("p", "overall", n, "fit"), n, fit, n)

    try:
        jobs.result(("p", "overall", 0, "hold"), 0, release.wait, 10)  # the worker is busy
        assert isinstance(jobs.result(("p", "overall", 1, "check"), 1, check, 1), Pending)
        assert isinstance(jobs.result(("p", "overall", 1, "fit"), 1, fit, 1), Pending)  # behind
        release.set()
        assert jobs._jobs[("p", "overall", 1, "check")].result(10) == "check of fit of 1"
        assert jobs.result(("p", "overall", 1, "fit"), 1, fit, 1) == "fit of 1"
        assert calls == [1]  # the queued fit job was not run
        jobs.result(("p", "overall", 2, "fit"), 2, fit, 2)
        assert jobs._jobs[("p", "overall", 2, "fit")].result(10) == "fit of 2"
        jobs.result(("p", "overall", 2, "check"), 2, check, 2)
        assert jobs._jobs[("p", "overall", 2, "check")].result(10) == "check of fit of 2"
        assert calls == [1, 2]  # the finished fit was read
    finally:
        release.set()
        jobs.shutdown()


def test_more_judgments_under_the_same_last_sequence_number_are_a_new_question(monkeypatch):
    """On PostgreSQL a lower sequence number can commit late: the judgments grow, the last
    number does not. The default model's fit of the fewer judgments must not answer for them."""
    import polars as pl

    from adaptive.estimation.source import Source
    from services.runtime import background

    def fits(source: Source) -> str:
        return f"fit of {source.num_judgments}"

    def source(num_judgments: int) -> Source:
        return Source(pl.DataFrame(), "overall", (), num_judgments=num_judgments, last_seq=9)

    monkeypatch.setattr(background, "significance_fits", fits)
    jobs = BackgroundJobs()
    try:
        for n in (8, 9):  # judgment 5 committed after judgment 9 was read
            background.default_fits(jobs, "p", source(n))
            key = ("p", "overall", background.seen(source(n)), "significance")
            assert jobs._jobs[key].result(10) == f"fit of {n}"
            assert background.default_fits(jobs, "p", source(n)) == f"fit of {n}"
    finally:
        jobs.shutdown()
