"""Journaled effects: how each tool with an effect outside the task is applied and checked.

Each is an ``EffectKind`` for the task's ``Journal``: ``apply`` makes the
effect from its journal entry (again, on resume, if it is idempotent) and
``check`` tells whether an entry an earlier attempt left unfinished took
effect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared_state import Child, EffectStatus, JournalEntry, Role

if TYPE_CHECKING:
    from .task import AgentTask


class WriteFile:
    name, idempotent, records_itself = "write_file", True, False

    def __init__(self, agent: AgentTask) -> None:
        self.agent = agent

    def apply(self, entry: JournalEntry) -> str:
        path, artifact = entry.detail["path"], entry.detail["artifact"]
        self.agent.write_files({path: artifact})
        return f"wrote {path} ({entry.detail['bytes']} bytes) as {artifact}"

    def check(self, entry: JournalEntry) -> bool | None:
        return self.agent.records.files().get(entry.detail["path"]) == entry.detail["artifact"]


class Spawn:
    """Spawning tasks; the spawn script writes the done entry in the same atomic step."""

    idempotent, records_itself = False, True

    def __init__(self, agent: AgentTask, name: str) -> None:
        self.agent = agent
        self.name = name

    def apply(self, entry: JournalEntry) -> str:
        children = [
            Child(Role(c["role"]), c["brief"], c["input"]) for c in entry.detail["children"]
        ]
        result = f"dispatched {len(children)} task(s); this task resumes when all are done"
        done = entry.to(EffectStatus.DONE, result)
        ids = self.agent.run.spawn(
            entry.detail["wave"], children, journal=(entry.key, done.model_dump_json())
        )
        return f"{result}: {', '.join(ids)}"

    def check(self, entry: JournalEntry) -> bool | None:
        task, tasks = self.agent.task, self.agent.run.state.tasks
        spawned = {c.input for c in tasks.children(task.job_id, task.task_id, entry.detail["wave"])}
        return all(c["input"] in spawned for c in entry.detail["children"])
