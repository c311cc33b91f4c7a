"""services.api.background.BackgroundJobs: one job per key, and a newer job of a group
drops the queued ones it supersedes."""

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

    group = ("p", ("overall",), "recommend", 0)
    try:
        assert isinstance(jobs.result((*group, 1), 10, work, "first", supersedes=group), Pending)
        assert started.wait(10)  # running: it cannot be dropped
        assert isinstance(jobs.result((*group, 2), 20, work, "second", supersedes=group), Pending)
        other = ("p", ("overall",), "recommend", 1)  # another seed: another group
        assert isinstance(jobs.result((*other, 2), 20, work, "seed 1", supersedes=other), Pending)
        assert isinstance(jobs.result((*group, 3), 30, work, "third", supersedes=group), Pending)
        release.set()
        jobs._pool.shutdown(wait=True)
        assert ran == ["first", "seed 1", "third"]  # "second" was dropped while queued
        assert jobs.result((*group, 3), 30, work, "third", supersedes=group) == "third"
        assert jobs.result((*group, 1), 10, work, "first", supersedes=group) == "first"
        assert (*group, 2) not in jobs._jobs
    finally:
        release.set()
        jobs.shutdown()
