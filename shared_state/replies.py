"""What each script's replies mean to its caller: one map, per script.

A script answers ``{code, data, events}`` (``scripts.ScriptResult``). For each
script, a code other than OK is either an *outcome* its caller handles (a
claim that finds nothing to claim returns None) or an *error*, the one
``StateError`` this map makes of it. Callers pass every reply through
``check``, so a code cannot mean one exception at one call site and another
at the next; ``tests/test_state_storage.py`` pins the map against the codes
each script's header documents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .errors import (
    BudgetExceeded,
    Code,
    Fenced,
    FileChanged,
    ForeignTarget,
    Forgotten,
    JobFinished,
    JobNotFound,
    MemoryNotFound,
    MemoryRefused,
    NotBlocked,
    NotResumable,
    NotRetryable,
    QuestionChanged,
    RecordChanged,
    StateError,
    SubmitUnconfirmed,
    TaskNotFound,
)
from .models import Claim
from .scripts import ScriptResult

ABSENT = "\0"  # ownerWrite: a guard's value for a field that must not exist


@dataclass(frozen=True)
class Asked:
    """What the caller asked about: the ids and values an error names."""

    job_id: str = ""
    task_id: str = ""
    claim: Claim | None = None
    tokens: int = 0  # reserveTokens: the tokens asked for
    path: str = ""  # memoryFile: the file, as shown
    expected: str = ""  # memoryFile: the sha256 the writer read; decideTask: the digest
    target: str = ""  # memoryFile: where a rename moves it

    @classmethod
    def owner(cls, claim: Claim) -> Asked:
        return cls(job_id=claim.job_id, task_id=claim.task_id, claim=claim)


Error = Callable[[ScriptResult, Asked], StateError]


def _fenced(res: ScriptResult, a: Asked) -> StateError:
    assert a.claim is not None
    return Fenced(a.claim.task_id, a.claim.token, res.data, a.claim.owner)


def _finished(res: ScriptResult, a: Asked) -> StateError:
    return JobFinished(a.job_id, res.data.get("job_status", "finished"))


def _changed(res: ScriptResult, a: Asked) -> StateError:
    current = res.data["current"]
    return RecordChanged(a.task_id, res.data["field"], None if current == ABSENT else current)


def _file_changed(res: ScriptResult, a: Asked) -> StateError:
    if res.data["current"] == "target exists":  # a rename's target: nothing was moved
        return MemoryRefused(f"{a.target} exists already")
    return FileChanged(a.path, a.expected, res.data["current"])


def _forgotten(res: ScriptResult, a: Asked) -> StateError:
    what = res.data["what"]
    return Forgotten("this text" if what == "text" else f"item {what}")


_NO_TASK: Error = lambda res, a: TaskNotFound(a.task_id)  # noqa: E731
_NO_JOB: Error = lambda res, a: JobNotFound(a.job_id)  # noqa: E731
# An owner's write: its claim is stale, its job has ended, or the task is gone.
_OWNER: dict[Code, Error] = {
    Code.NOT_FOUND: _NO_TASK,
    Code.FENCED: _fenced,
    Code.JOB_FINISHED: _finished,
}

ERRORS: dict[str, dict[Code, Error]] = {
    "blockTask": _OWNER,
    "cancelJob": {Code.NOT_FOUND: _NO_JOB, Code.JOB_FINISHED: _finished},
    "claimTask": {Code.NOT_FOUND: _NO_TASK},
    "completeTask": _OWNER,
    "decideTask": {
        Code.NOT_FOUND: _NO_TASK,
        Code.NOT_CLAIMABLE: lambda res, a: (
            QuestionChanged(a.task_id, a.expected, res.data["asks_now"])
            if "asks_now" in res.data
            else NotBlocked(a.task_id, res.data["status"])
        ),
        Code.JOB_FINISHED: _finished,
    },
    "endTasks": {Code.NOT_FOUND: _NO_JOB},
    "failTask": _OWNER,
    "memoryFile": {
        Code.NOT_FOUND: lambda res, a: MemoryNotFound(a.path),
        Code.NOT_CLAIMABLE: _file_changed,
        Code.FORGOTTEN: _forgotten,
    },
    "memoryWrite": {
        Code.NOT_FOUND: lambda res, a: MemoryNotFound(res.data["what"]),
        Code.FORGOTTEN: _forgotten,
    },
    "ownerWrite": {
        **_OWNER,
        Code.FOREIGN_TARGET: lambda res, a: ForeignTarget(a.task_id, res.data["key"]),
        Code.CHANGED: _changed,
    },
    "renewLease": _OWNER,
    "reserveTokens": {
        Code.OVER_BUDGET: lambda res, a: BudgetExceeded(
            a.job_id, a.tokens, int(res.data["remaining"]), str(res.data.get("which", "tokens"))
        ),
    },
    "resumeJob": {
        Code.NOT_FOUND: _NO_JOB,
        Code.JOB_FINISHED: lambda res, a: NotResumable(
            a.job_id, f"it is {res.data['job_status']}: only a finished job"
        ),
    },
    "retryJob": {
        Code.NOT_FOUND: _NO_JOB,
        Code.JOB_FINISHED: lambda res, a: NotRetryable(a.job_id, res.data["job_status"]),
    },
    "spawnChildren": _OWNER,
    "submitJob": {
        Code.NOT_CLAIMABLE: lambda res, a: SubmitUnconfirmed(
            a.job_id, f"Redis answered after {res.data['late_ms']} ms; nothing was created"
        ),
    },
}
# Codes a caller handles as what happened, not as an error.
OUTCOMES: dict[str, frozenset[Code]] = {
    "claimTask": frozenset({Code.NOT_CLAIMABLE, Code.JOB_FINISHED}),  # None: not claimed
    "endTasks": frozenset({Code.JOB_FINISHED}),  # a retry began first: nothing to end
    # The lease is live again, or its task's record is gone: nothing to reap.
    "reapTask": frozenset({Code.NOT_CLAIMABLE, Code.NOT_FOUND}),
    "redeliverTask": frozenset({Code.NOT_CLAIMABLE}),  # not lost after all: nothing to send
    "swapEnvelope": frozenset({Code.NOT_FOUND}),  # taken by another slot: nothing swapped
}


def check(script: str, res: ScriptResult, asked: Asked) -> ScriptResult:
    """``res`` when its code is OK or an outcome of ``script``; otherwise the error the
    code means for that script, raised."""
    if res.code == Code.OK or res.code in OUTCOMES.get(script, ()):
        return res
    error = ERRORS.get(script, {}).get(Code(res.code))
    if error is None:
        raise StateError(f"{script} answered code {res.code}, which it does not document")
    raise error(res, asked)
