"""``TaskRun``: what a behaviour sees of the one task it is running.

It holds the claim (and so the fencing token) and exposes only fenced
operations: every write goes through the state layer's scripts with the
token. The writes that end the claim (complete, spawn, fail) are settled
with the slot's lease, so that a renewal never races the owner's last write,
and are not even sent once the lease is lost; the writes a task makes as it
goes (checkpoints, journal, workspace) are fenced by the same token and come
after a ``check``.

``check`` raises LeaseLost once the lease is lost: refused by Redis, or past
its local deadline (see ``lease``) — a worker cut off from Redis stops at
lease expiry, whatever its heartbeat thread is blocked in.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from shared_state import Child, Claim, Job, State, Task
from shared_state.backoff import Failure
from shared_state.tasks import Opened

from .lease import Lease


@dataclass
class TaskRun:
    state: State
    job: Job
    task: Task
    claim: Claim
    lease: Lease
    opened: Opened | None = None  # the run's records, when its claim opened it

    def check(self) -> None:
        """Raise LeaseLost if this worker no longer owns the task."""
        self.lease.check()

    def work_for(self, seconds: float) -> None:
        """Simulated work of a scripted behaviour, checking the lease as it goes."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.check()
            self.lease.lost.wait(min(left, 0.1))
        self.check()

    def complete(self, result: str = "") -> None:
        done = self.lease.settle(
            lambda: self.state.tasks.complete(self.claim, self.task.parent_id, result)
        )
        if done.job_finished:
            self._ended()

    def spawn(
        self, stage: str, children: Sequence[Child], *, journal: tuple[str, str] = ("", "")
    ) -> list[str]:
        """Spawn children and wait for them without holding this worker."""
        return self.lease.settle(
            lambda: self.state.tasks.spawn(self.claim, stage, children, journal=journal)
        )

    def fail(self, reason: str, *, retryable: bool = True, kind: Failure = Failure.ERROR) -> str:
        outcome = self.lease.settle(
            lambda: self.state.tasks.fail(self.claim, reason, retryable=retryable, kind=kind)
        )
        if outcome == "dead":  # and with it the job
            self._ended()
        return outcome

    def block(self, question: str, *, approval_for: str) -> None:
        """Park the task for a person (its job is blocked); it resumes at this stage."""
        self.lease.settle(
            lambda: self.state.tasks.block(
                self.claim, question, approval_for=approval_for, stage=self.task.stage
            )
        )
        self._handoff()  # the package names what waits for the person

    def _handoff(self) -> None:
        """The blocked job's handoff package, as an artifact (a scripted behaviour's too)."""
        from .handoff import write  # the package reads the roles' records; they import this

        write(self.state, self.job.job_id)

    def _ended(self) -> None:
        """The job ended with this task's write: the job-finished hook (``handoff.job_ended``)."""
        from .handoff import job_ended

        job_ended(self.state, self.job.job_id)
