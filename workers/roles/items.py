"""Jobs over many items: the item list, its batches, and what coders and checks report.

A goal over N items (the workspace's files matching a glob, or the lines of
an input file) is one JSON artifact, the item list, whose statuses move only
by code: ``pending`` → ``done`` or ``failed`` when a coder reports its batch,
→ ``validated`` only on a passing run of the job's check (its log is the
evidence), or ``failed`` on a failing one. The planner never reads the list
into a prompt: it gets counts and the list's handle, so its context stays
bounded however many items there are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ItemStatus = Literal["pending", "done", "validated", "failed"]
MAX_ITEMS = 20_000


class Item(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str  # I0001, I0002, ...
    item: str  # a workspace path, or one line of the input list
    status: ItemStatus = "pending"
    evidence: list[str] = Field(default_factory=list)  # artifact ids: check logs
    note: str = ""


class ItemResult(BaseModel):
    """What a coder reports for one item of its batch."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^I[0-9]{4,5}$")
    status: Literal["done", "failed"]
    note: str = Field(default="", max_length=300)


class ItemCheck(BaseModel):
    """A run of the job's check over one item."""

    id: str
    passed: bool
    log: str  # the log's artifact id


class ItemList(BaseModel):
    model_config = ConfigDict(frozen=True)

    source: str  # how the items were chosen, e.g. "files matching src/**/*.py"
    items: list[Item] = Field(min_length=1, max_length=MAX_ITEMS)

    @classmethod
    def of(cls, source: str, values: Iterable[str]) -> ItemList:
        return cls(
            source=source,
            items=[Item(id=f"I{n:04d}", item=v) for n, v in enumerate(values, start=1)],
        )

    def counts(self) -> dict[str, int]:
        found = Counter(i.status for i in self.items)
        return {s: found.get(s, 0) for s in ("pending", "done", "validated", "failed")}

    def line(self) -> str:
        """``480 of 500 items done (470 validated, 10 failed, 20 pending)``."""
        c = self.counts()
        finished = c["done"] + c["validated"]
        return (
            f"{finished} of {len(self.items)} items done ({c['validated']} validated, "
            f"{c['failed']} failed, {c['pending']} pending)"
        )

    def open(self) -> list[Item]:
        """Items still to do: pending, or failed (a later batch may try them again)."""
        return [i for i in self.items if i.status in ("pending", "failed")]

    def batches(self, items: Sequence[Item], size: int) -> list[list[Item]]:
        return [list(items[n : n + size]) for n in range(0, len(items), size)]

    def by_id(self) -> dict[str, Item]:
        return {i.id: i for i in self.items}

    def reported(self, results: Iterable[ItemResult]) -> ItemList:
        """The coders' reports applied: done or failed, never validated (only a check
        validates); a validated item stays validated."""
        given = {r.id: r for r in results}
        return self._with(
            lambda i: (
                i
                if i.id not in given or i.status == "validated"
                else i.model_copy(update={"status": given[i.id].status, "note": given[i.id].note})
            )
        )

    def checked(self, checks: Iterable[ItemCheck]) -> ItemList:
        """Runs of the job's check applied: validated on a pass (its log the evidence),
        failed on a failure."""
        given = {c.id: c for c in checks}

        def mark(i: Item) -> Item:
            c = given.get(i.id)
            if c is None:
                return i
            status: ItemStatus = "validated" if c.passed else "failed"
            return i.model_copy(update={"status": status, "evidence": [c.log]})

        return self._with(mark)

    def _with(self, change: Callable[[Item], Item]) -> ItemList:
        return self.model_copy(update={"items": [change(i) for i in self.items]})


def render_batch(items: Sequence[Item]) -> str:
    """One coder's share as its input artifact: a line per item, its id, a tab, the item
    (read_lines shows it as it is; an item is one line of a file, or a path)."""
    return "".join(f"{i.id}\t{i.item}\n" for i in items)


def batch_ids(text: str) -> list[str]:
    """The item ids of a batch artifact's text."""
    return [line.split("\t", 1)[0] for line in text.splitlines() if "\t" in line]
