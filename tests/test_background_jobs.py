"""services.api.background.BackgroundJobs: one job per key, and a newer job of the same
question (the key but the judgments seen) drops the queued ones."""

from __future__ import annotations

import threading

from services.api.background import BackgroundJobs, Pending


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
