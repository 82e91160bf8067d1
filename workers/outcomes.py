"""What a task's run comes to, typed, and the one place that settles it.

A role (``roles.run``) or a scripted behaviour (``scenarios.run``) returns an
``Outcome``; the worker passes it to ``settle``, which makes the one fenced
write that ends the claim. So whether a task is done, dead or tried again is
decided here, from the outcome's type, and nowhere else:

    Done(result)              completeTask: the task succeeded (its result: an artifact id)
    HandedOff()               nothing: its spawn (a tool's fenced write) ended the claim,
                              and it resumes when its children are done
    Asks(question, digest)    blockTask: it waits for a person (``errors.Blocked``)
    Failed(reason, retryable, kind)
                              failTask: dead, and its job with it, unless retryable and
                              attempts are left (an unexpected error is retryable); a
                              retry waits out the backoff of its kind of failure
                              (``shared_state.backoff.RETRY``) before it is delivered
"""

from __future__ import annotations

from dataclasses import dataclass

from shared_state.backoff import Failure

from .task_run import TaskRun

MAX_REASON = 500  # a reason or question is kept at most this long on the task


@dataclass(frozen=True)
class Done:
    result: str = ""


@dataclass(frozen=True)
class HandedOff:
    by: str = ""  # the tool whose spawn ended the claim


@dataclass(frozen=True)
class Asks:
    question: str
    approval_for: str  # the digest of the call an approval lets through


@dataclass(frozen=True)
class Failed:
    reason: str
    retryable: bool = False
    kind: Failure = Failure.ERROR


Outcome = Done | HandedOff | Asks | Failed


def settle(run: TaskRun, outcome: Outcome) -> None:
    """End the run's claim as ``outcome`` says, with its one fenced write."""
    match outcome:
        case Done(result):
            run.complete(result)
        case HandedOff():
            pass
        case Asks(question, approval_for):
            run.block(question[:MAX_REASON], approval_for=approval_for)
        case Failed(reason, retryable, kind):
            run.fail(reason[:MAX_REASON], retryable=retryable, kind=kind)
