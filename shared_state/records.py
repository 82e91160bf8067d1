"""What a running task records, so that a resumed attempt continues from records.

    journal      one entry per tool call with an external effect: its intent
                 (under an idempotency key), then its result
    checkpoints  each task's last working state (JSON), saved after every step
    workspace    path -> artifact id of every file the job's coders wrote (one
                 per job, shared by its tasks: the last write of a path wins), or
                 "" for a file of the job's base they deleted
    progress     a job over many items: its item list's artifact id and counts

Anyone may read them; every write is a task owner's, fenced by its token
(``ownerWrite``), so a worker that lost its claim cannot write after its
successor started.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from redis.client import Pipeline

from . import keys
from .models import Claim
from .replies import Asked, check
from .scripts import run_plain_reading
from .tasks import Opened, TaskStore


class EffectStatus(StrEnum):
    INTENT = "intent"  # about to run: a crash from here on leaves it unresolved
    DONE = "done"  # ran; ``result`` holds what it returned
    NOT_DONE = "not_done"  # a resumed attempt found it never took effect
    BLOCKED = "blocked"  # unresolved and uncheckable: a person must decide
    APPROVED = "approved"  # being made again on a person's approval (used once: a crash
    # from here on blocks it again rather than make it a third time)
    ASKED = "asked"  # a call of a tool the job gates (``submit --approve``), not made: it
    # waits for a person; approved, the entry is DONE and the same call goes through


class JournalEntry(BaseModel):
    """One journaled tool call. ``detail`` holds ids and small values, never payloads."""

    model_config = ConfigDict(frozen=True)

    key: str  # idempotency key task:target:stage, e.g. "c-1:write_file a.py#9f2c01aa:start"
    task_id: str
    tool: str
    status: EffectStatus
    detail: dict[str, Any] = Field(default_factory=dict)
    result: str = Field(default="", max_length=1_000)

    def to(self, status: EffectStatus, result: str = "") -> JournalEntry:
        return self.model_copy(update={"status": status, "result": result[:1_000]})


class Opening(BaseModel):
    """What a task run starts from: what its claim sent back (or ``Records.opened`` read),
    with the reads outside its job (``opening_from``)."""

    model_config = ConfigDict(frozen=True)

    checkpoint: str | None  # the task's last checkpoint (JSON), if any
    journal: dict[str, JournalEntry]  # the task's journal entries by key
    input: str | None  # its input artifact's text; None when it has none, or when a
    # forget redacted it to a copy (read it through the artifact store then)
    document: str | None = None  # the content of the file at ``document_key``, if asked
    also: tuple[Any, ...] = ()  # the replies to the reads ``also`` queued, in order


def _entries(flat: dict[str, str], task_id: str) -> dict[str, JournalEntry]:
    """A task's journal entries by key, from ``readJournal``'s or a claim's reply."""
    entries = map(JournalEntry.model_validate_json, flat.values())
    return {e.key: e for e in entries if e.task_id == task_id}


def opening_from(
    opened: Opened, task_id: str, document: bytes | None, also: Sequence[Any]
) -> Opening:
    """The ``Opening`` of a run from its records (``Opened``: its claim's, or
    ``Records.opened``) and the reads outside its job: the document and the ``also``
    replies."""
    return Opening(
        checkpoint=opened.checkpoint,
        journal=_entries(opened.journal, task_id),  # the claim sent the task's own only
        input=opened.input,
        document=document.decode() if document is not None else None,
        also=tuple(also),
    )


class Records:
    """The journal, checkpoints, workspace and progress of one job."""

    def __init__(self, tasks: TaskStore, job_id: str) -> None:
        self.tasks = tasks
        self.client = tasks.client
        self.job_id = job_id

    def entries(self) -> list[JournalEntry]:
        """Every journal entry of the job, in no particular order (one read)."""
        raw = self.client.hgetall(keys.journal(self.job_id))
        return [JournalEntry.model_validate_json(v) for v in raw.values()]

    def journal(self, task_id: str) -> dict[str, JournalEntry]:
        """A task's journal entries by key, in no particular order (``readJournal``: by
        their names, unless an entry of the job has none)."""
        return _entries(self._read(task_id, lambda pipe: None)[0], task_id)

    def opened(self, task_id: str, input_id: str = "") -> Opened:
        """A task's checkpoint, its journal entries and its input's text, in one round trip,
        as a claim that opens the run sends them back (``TaskStore.claim``): for a run
        whose claim did not."""

        def reads(pipe: Pipeline) -> None:
            pipe.hget(keys.checkpoints(self.job_id), task_id)
            if input_id:
                pipe.hmget(keys.artifact(self.job_id, input_id), ["content", "redacted_to"])

        journal, (saved, *rest) = self._read(task_id, reads)
        text = None
        if rest and rest[0][0] is not None and rest[0][1] is None:
            text = rest[0][0].decode()
        return Opened(
            checkpoint=saved.decode() if saved is not None else None,
            journal=journal,
            input=text,
            read=None,
        )

    def _read(
        self, task_id: str, reads: Callable[[Pipeline], None]
    ) -> tuple[dict[str, str], list[Any]]:
        """The task's entries (key -> JSON) by ``readJournal``, and the replies to ``reads``."""
        where = keys.script_keys("readJournal", self.job_id)
        res, read = run_plain_reading(self.client, "readJournal", where, [task_id], reads)
        return check("readJournal", res, Asked(job_id=self.job_id)).data["journal"], read

    def checkpoint(self, task_id: str) -> str | None:
        raw = self.client.hget(keys.checkpoints(self.job_id), task_id)
        return raw.decode() if raw is not None else None

    def checkpoints(self, task_ids: Sequence[str]) -> dict[str, str]:
        """The checkpoints of those of ``task_ids`` that have one, in one read."""
        if not task_ids:
            return {}
        raw = self.client.hmget(keys.checkpoints(self.job_id), list(task_ids))
        return {t: v.decode() for t, v in zip(task_ids, raw, strict=True) if v is not None}

    def files(self) -> dict[str, str]:
        """The workspace: path -> artifact id, sorted by path."""
        raw = self.client.hgetall(keys.workspace(self.job_id))
        return {k.decode(): v.decode() for k, v in sorted(raw.items())}

    def progress(self) -> dict[str, str]:
        """A job over many items: ``items`` (the list's artifact id) and its counts."""
        raw = self.client.hgetall(keys.progress(self.job_id))
        return {k.decode(): v.decode() for k, v in raw.items()}

    def write(
        self,
        claim: Claim,
        *,
        journal: Sequence[JournalEntry] = (),
        checkpoint: str | None = None,
        files: Mapping[str, str] | None = None,
        progress: Mapping[str, str | int] | None = None,
        file_guards: Mapping[str, str | None] | None = None,
        ride: bool = False,
    ) -> None:
        """Write any of them in one fenced, atomic step.

        ``file_guards``: path -> the workspace value the writer read (None: no entry);
        if any changed since, RecordChanged is raised and nothing is written.
        ``ride``: with this thread's next write, not in a round trip of its own.
        """
        for e in journal:  # a task's entries are its own, under keys of its id
            if e.task_id != claim.task_id or not e.key.startswith(f"{claim.task_id}:"):
                raise ValueError(f"journal entry {e.key!r} is not one of task {claim.task_id}")
        writes = [(keys.journal(self.job_id), e.key, e.model_dump_json()) for e in journal]
        if checkpoint is not None:
            writes.append((keys.checkpoints(self.job_id), claim.task_id, checkpoint))
        writes += [(keys.workspace(self.job_id), p, a) for p, a in (files or {}).items()]
        writes += [(keys.progress(self.job_id), k, str(v)) for k, v in (progress or {}).items()]
        guards = [(keys.workspace(self.job_id), p, v) for p, v in (file_guards or {}).items()]
        if writes:
            self.tasks.owner_write(claim, writes, guards, ride=ride)
