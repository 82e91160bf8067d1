"""``RunContext``: one task run's context, handed to every tool; the one owner of its state.

It owns the working state, the artifact sink the task stores into and the
task's journal. Tools read the state through it and change it only through
its methods (an artifact kept, a counter set, a change applied); the agent
loop gives it the state the context engine rebuilt (``adopt``), tells it
which model call is being acted on (``step``) and checkpoints it. Nothing
else holds a copy of the state: what a checkpoint writes is what the
context holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shared_state import ArtifactRef, ArtifactSink, Trust

from .context import WorkingState
from .errors import ToolRefused

if TYPE_CHECKING:
    from .journal import Journal


class RunContext:
    def __init__(
        self,
        state: WorkingState,
        *,
        artifacts: ArtifactSink,
        journal: Journal | None = None,
        source: str = "",
        save: Callable[[WorkingState, bool], None] | None = None,
        flush: Callable[[], None] | None = None,
    ) -> None:
        """``save(state, ride)``: writes a checkpoint (with the run's next write, if
        ``ride``); ``flush``: sends what rides now."""
        self._state = state
        self.artifacts = artifacts
        self.journal = journal
        self.source = source  # what the artifacts the run stores name as their source
        self.step = 0  # the model call whose answer is being acted on (set by the loop)
        self._save = save
        self._flush = flush

    @property
    def state(self) -> WorkingState:
        """The working state (immutable: every change goes through this context)."""
        return self._state

    def update(self, change: Callable[[WorkingState], WorkingState]) -> WorkingState:
        """Apply ``change`` to the state; the new state is the context's."""
        self._state = change(self._state)
        return self._state

    def adopt(self, rebuilt: WorkingState) -> None:
        """Take the state the context engine rebuilt from this one (rolled turns, compacted
        parts, recorded drops): the agent loop's build step."""
        self._state = rebuilt

    def keep(self, ref: ArtifactRef, *, name: str = "") -> None:
        """List an artifact the task made in its working state (and name it, if given)."""
        self.update(lambda s: s.add_artifact(ref))
        if name:
            self.update(lambda s: s.with_ref(name, ref))

    def track(self, counter: str, value: int) -> None:
        """Set a progress counter of the working state."""
        self.update(lambda s: s.with_progress(counter, value))

    def store(
        self,
        content: str,
        *,
        kind: str,
        title: str,
        trust: Trust = Trust.UNTRUSTED,
        source: str = "",
    ) -> ArtifactRef:
        """Store an artifact this run made (its source: this run's, unless named)."""
        return self.artifacts.put(
            content, kind=kind, title=title, source=source or self.source, trust=trust
        )

    def perform(
        self,
        tool: str,
        target: str,
        arguments: dict[str, Any],
        prepare: Callable[[], dict[str, Any]],
    ) -> str:
        """Run an effect outside the task once, through the journal (``Journal.perform``)."""
        if self.journal is None:
            raise ToolRefused(f"{tool}: this run keeps no journal, so it makes no effects")
        return self.journal.perform(tool, target, arguments, prepare)

    def reconcile(self) -> None:
        """Settle what an earlier attempt left unfinished; each settled effect becomes a fact."""
        if self.journal is None:
            return
        notes = self.journal.reconcile()
        if notes:
            facts = [(f"resumed; journal settled: {n}", "journal") for n in notes]
            self.update(lambda s: s.apply_model_update(step=0, facts=facts))

    def checkpoint(self, *, ride: bool = False) -> None:
        """Save the state the context holds (a run without a saver keeps it in memory only).

        ``ride``: with the run's next write (the next call's reservation), which
        ``flush`` makes sure goes before the next model call.
        """
        if self._save is not None:
            self._save(self._state, ride and self._flush is not None)  # no flush: now

    def flush(self) -> None:
        """Send a checkpoint (or a settlement) still riding: before a model call."""
        if self._flush is not None:
            self._flush()
