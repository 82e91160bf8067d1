"""Journaled tool calls: intent, then effect, then result, under an idempotency key.

A tool call with an effect outside the task (a file written to the job's
workspace, tasks spawned) is recorded as an intent before it runs and as
done after it, under the key ``task:target:stage``; the target names the
tool, what it changes and a digest of its arguments. The same call in the
same stage is the same effect: a replay after a crash gets the recorded
result back instead of running the effect again (so appending the same text
twice in one stage appends it once). An idempotent effect undone since
(writing A, then B, then A again) is made again.

A resumed task settles every intent that has no result before its model
runs again (``reconcile``): the effect's own ``check`` says whether it took
effect (then it is done, or not done and free to run when called again);
an effect without a check is applied again only if it is idempotent;
anything else stops the task as blocked, for a person to decide. Nothing is
run twice blindly.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import structlog

from shared_state import EffectStatus, JournalEntry, Records

from . import failpoints
from .errors import Blocked, ToolRefused
from .task_run import TaskRun


class EffectKind(Protocol):
    """How one tool's effect is applied again, and checked, from its journal entry."""

    name: str
    idempotent: bool
    records_itself: bool  # apply() writes the done entry atomically with the effect

    def apply(self, entry: JournalEntry) -> str: ...

    def check(self, entry: JournalEntry) -> bool | None:
        """True: it took effect; False: it did not; None: this effect cannot tell."""
        ...


ASK = "ask"  # the journal's tool for a gated call's approval (its detail names the call's tool)

log = structlog.get_logger("redfleet.journal")


def approval_digest(entry: JournalEntry) -> str:
    """What an approval of ``entry`` is bound to: its key names the tool, target, arguments
    and stage, so a changed call is another digest and needs its own approval."""
    return hashlib.sha256(entry.key.encode()).hexdigest()[:16]


def _shown(arguments: dict[str, Any], limit: int = 120) -> str:
    """A call's arguments for a person to judge: each value whole up to ``limit`` characters,
    a longer one cut with its full length said (the question is stored at most 500)."""
    parts = []
    for name, value in arguments.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(text) > limit:
            text = f"{text[:limit]}… ({len(text)} characters)"
        parts.append(f"{name}={json.dumps(text, ensure_ascii=False)}")
    return " ".join(parts) or "(no arguments)"


class Journal:
    """One task's journal, for the stage it runs now."""

    def __init__(
        self,
        run: TaskRun,
        records: Records,
        stage: str,
        kinds: Sequence[EffectKind],
        entries: dict[str, JournalEntry] | None = None,
    ) -> None:
        """``entries``: the task's journal as the run's opening read it (else read now)."""
        self.run = run
        self.records = records
        self.stage = stage or "start"
        self.kinds = {k.name: k for k in kinds}
        self.entries = records.journal(run.task.task_id) if entries is None else entries

    def key(self, tool: str, target: str, arguments: dict[str, Any]) -> str:
        digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:8]
        return f"{self.run.task.task_id}:{tool} {target}#{digest}:{self.stage}"

    def perform(
        self,
        tool: str,
        target: str,
        arguments: dict[str, Any],
        prepare: Callable[[], dict[str, Any]],
    ) -> str:
        """Run a journaled call once; ``prepare`` gives the intent's detail (ids, no payloads)."""
        key = self.key(tool, target, arguments)
        kind = self.kinds[tool]
        done = self.entries.get(key)
        if done is not None and done.status is EffectStatus.DONE:
            if kind.records_itself:
                # A spawn made in this stage: this run already handed off once.
                raise ToolRefused(f"{tool} with these arguments was already done: {done.result}")
            if not (kind.idempotent and kind.check(done) is False):
                return f"{done.result} (already done earlier; recorded, not run again)"
            # An idempotent effect undone since (A, B, then A again): make it again.
        intent = JournalEntry(
            key=key,
            task_id=self.run.task.task_id,
            tool=tool,
            status=EffectStatus.INTENT,
            detail=prepare(),
        )
        self._write(intent)
        failpoints.reach(f"journal.after-intent.{tool}")
        result = self._apply(kind, intent)
        failpoints.reach(f"journal.after-effect.{tool}")
        if not kind.records_itself:
            self._write(intent.to(EffectStatus.DONE, result))
        return result

    def ask(self, tool: str, arguments: dict[str, Any], shown: dict[str, Any]) -> None:
        """Let a call of a tool the job gates (``submit --approve``) through once a person
        approved this very call in this stage; until then it is not made: ``Blocked``,
        with the call (``shown``: its arguments as a person reads them) as the question.

        The whole call is stored as a ``call`` artifact, named in the question, and
        its entry's key holds the full sha256 of tool and arguments: an approval lets
        exactly that call through. The approval is journaled (the ``ask`` entry made
        ``done``), so the same call made again in the stage — a replay, a resumed run
        — goes through without asking again; a call with other arguments asks anew.
        """
        call = json.dumps({"tool": tool, "arguments": arguments}, sort_keys=True)
        digest = hashlib.sha256(call.encode()).hexdigest()
        key = f"{self.run.task.task_id}:{ASK} {tool}#{digest}:{self.stage}"
        known = self.entries.get(key)
        if known is not None and known.status is EffectStatus.DONE:
            return
        if known is not None and self.run.task.approved_for == approval_digest(known):
            self._write(known.to(EffectStatus.DONE, "approved by a person"))
            return
        ref = self.run.state.artifacts(self.run.job.job_id).put(
            call,
            kind="call",
            title=f"{tool}, as {self.run.task.task_id} asks to call it",
            source=f"task:{self.run.task.task_id}",
        )
        entry = JournalEntry(
            key=key,
            task_id=self.run.task.task_id,
            tool=ASK,
            status=EffectStatus.ASKED,
            detail={"tool": tool, "call": ref.id},
        )
        self._write(entry)
        raise Blocked(
            f"may I call {tool} {_shown(shown)}? (the whole call: {ref.id})",
            approval_for=approval_digest(entry),
        )

    def approved_call(self) -> tuple[str, dict[str, Any]] | None:
        """The gated call a person approved for this task and stage, as it was asked
        (tool, arguments, read from its stored call); None when the task's approval is
        for something else (an effect to settle) or was used already."""
        approved = self.run.task.approved_for
        for entry in self.entries.values():
            asked = entry.tool == ASK and entry.status is EffectStatus.ASKED
            if asked and approval_digest(entry) == approved:
                store = self.run.state.artifacts(self.run.job.job_id)
                call = json.loads(store.text(entry.detail["call"]))
                return call["tool"], call["arguments"]
        return None

    def reconcile(self) -> list[str]:
        """Settle the intents an earlier attempt left without a result; what was done, per line.

        One that neither its check nor idempotence can settle raises ``Blocked``
        (the task waits for a person); once a person approved that very effect
        (``approved_for`` on the task: the digest of its key), it is made now.
        """
        notes = []
        approved = self.run.task.approved_for
        unsettled = (EffectStatus.INTENT, EffectStatus.BLOCKED, EffectStatus.APPROVED)
        for entry in list(self.entries.values()):
            if entry.status not in unsettled:
                continue
            kind = self.kinds.get(entry.tool)
            found = kind.check(entry) if kind is not None else None
            # An approval is used once: an entry already being made on it is not made again.
            approved_now = (
                approved == approval_digest(entry) and entry.status is not EffectStatus.APPROVED
            )
            if found is True:
                settled = entry.to(EffectStatus.DONE, "settled on resume: the effect was found")
            elif found is False:
                settled = entry.to(EffectStatus.NOT_DONE, "settled on resume: it never took effect")
            elif kind is not None and kind.idempotent:
                settled = entry.to(EffectStatus.DONE, self._apply(kind, entry))
            elif kind is not None and approved_now:
                self._write(entry.to(EffectStatus.APPROVED, "being made on a person's approval"))
                result = f"made again on a person's approval: {self._apply(kind, entry)}"
                settled = entry.to(EffectStatus.DONE, result)
            else:
                self._write(entry.to(EffectStatus.BLOCKED, "cannot tell whether it took effect"))
                raise Blocked(
                    f"{entry.key} was started by an earlier attempt and may or may not have "
                    "taken effect (no result, no check, not idempotent): approve to make it "
                    "again as its intent recorded it (over whatever is there now), or reject",
                    approval_for=approval_digest(entry),
                )
            self._write(settled)
            notes.append(f"{entry.tool} {entry.key}: {settled.result}")
        return notes

    def _apply(self, kind: EffectKind, entry: JournalEntry) -> str:
        """Make ``entry``'s effect, then say so in the worker's log: its own account, outside
        Redis, of every effect it was told it made (a failover drill counts them by key).
        An attempt that raised is not in it: its fence refused it, or no answer came — and
        if it took effect after all, the next attempt settles it (``reconcile``: found by
        its check, or made again only if it is idempotent)."""
        result = kind.apply(entry)
        log.info("journal.applied", job_id=self.run.task.job_id, task_id=entry.task_id,
                 key=entry.key, tool=entry.tool)  # fmt: skip
        return result

    def _write(self, entry: JournalEntry) -> None:
        self.run.check()
        self.records.write(self.run.claim, journal=[entry])
        self.entries[entry.key] = entry
