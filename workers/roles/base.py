"""What every role shares: one task run as an agent, resumed from its records.

An ``AgentTask`` reads the task's records — its input artifact (brief and
input refs), its last checkpointed working state and its journal — settles
any effect an earlier attempt left unfinished, then runs the agent loop with
the role's tools for the current stage, and in every stage ``note``, through
which the model writes its working state's own parts (``tools.notes``).
The working state is held by the loop (``AgentLoop.state``), tools change it
through the task's helpers, and it is checkpointed after every model
response; effects outside the task go through the journal. A task that
hands off (spawns children) ends its run and is resumed, by whichever
worker, at the stage it named, with its children's summaries as its first
message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared_state import (
    ArtifactRef,
    BudgetExceeded,
    Child,
    EffectStatus,
    JournalEntry,
    Role,
    State,
    Task,
    Trust,
)

from ..agent import AgentLimits, AgentLoop, AgentOutcome, Tool, ToolBox
from ..context import (
    ROLE_BUDGETS,
    CallLedger,
    ContextEngine,
    Message,
    Slot,
    WorkingState,
    tokenizer_for,
)
from ..errors import ProviderError, ToolRefused
from ..journal import EffectKind, Journal
from ..llm import Provider, ProviderChoice
from ..sandbox import workspace_path
from ..summary import DEFAULT_CAP, Summary, capped
from ..task_run import TaskRun
from ..tools import (
    ARTIFACT_ID,
    NOTE_DESCRIPTION,
    USER,
    Note,
    as_data,
    extract_fields,
    grep_artifact,
    lines_budget,
    read_lines,
    slim,
    write_note,
)

NAME = r"^[a-z0-9][a-z0-9-]{0,39}$"


def of_kind(handles: Sequence[str], kind: str) -> list[str]:
    """The artifact handles (``[artifact <id> <kind> ...]``) of one kind."""
    return [h for h in handles if h.split(" ", 3)[2:3] == [kind]]


ArtifactId = Annotated[str, Field(pattern=r"^a-[0-9a-f]{16}$", description="artifact id a-...")]


class TaskInput(BaseModel):
    """A spawned task's input, stored as an artifact; the task hash holds only its id."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["task", "subagent"] = "task"
    name: str = Field(pattern=NAME)
    brief: str = Field(min_length=1, max_length=4_000)
    inputs: tuple[str, ...] = ()  # artifact ids
    summary_cap: int = Field(default=DEFAULT_CAP, ge=200, le=20_000)


class Brief(BaseModel):
    """A task to dispatch, as the model writes it."""

    name: str = Field(pattern=NAME, description="short label, lowercase with hyphens")
    brief: str = Field(min_length=1, max_length=4_000, description="what to do and why")
    inputs: list[ArtifactId] = Field(default_factory=list, description="artifacts to read")


class Meter:
    """The job's usage sink: totals in Redis plus one ``model.called`` event per call."""

    def __init__(self, state: State, task: Task, worker: str, provider: Provider) -> None:
        self.state = state
        self.task = task
        self.worker = worker
        self.provider = provider
        self.calls = 0

    def record(
        self,
        *,
        input_tokens: int,
        cached_tokens: int,
        output_tokens: int,
        cost_usd: float,
        compaction: bool = False,
        event: dict[str, str | int] | None = None,
    ) -> object:
        self.calls += 1
        return self.state.usage(self.task.job_id).record(
            input_tokens=input_tokens,
            cached_tokens=cached_tokens,
            output_tokens=output_tokens,
            cost_usd=cost_usd,
            compaction=compaction,
            event={
                **(event or {}),  # the step's metrics, from the ledger
                "task_id": self.task.task_id,
                "worker": self.worker,
                "step": self.calls,
                "provider": self.provider.name,
                "model": self.provider.model,
                "kind": "compaction" if compaction else "step",
            },
        )


# -- effects: how each journaled tool is applied again and checked on resume -------------


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


class AppendFile:
    name, idempotent, records_itself = "append_file", False, False

    def __init__(self, agent: AgentTask) -> None:
        self.agent = agent

    def apply(self, entry: JournalEntry) -> str:
        path, after = entry.detail["path"], entry.detail["after"]
        self.agent.write_files({path: after})
        return f"appended {entry.detail['bytes']} bytes to {path}; it is now {after}"

    def check(self, entry: JournalEntry) -> bool | None:
        current = self.agent.records.files().get(entry.detail["path"], "")
        if current == entry.detail["after"]:
            return True
        if current == entry.detail["before"]:
            return False
        return None  # changed since by someone else: whether ours landed cannot be told


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
        task, tasks = self.agent.task, self.agent.state.tasks
        spawned = {c.input for c in tasks.children(task.job_id, task.task_id, entry.detail["wave"])}
        return all(c["input"] in spawned for c in entry.detail["children"])


# -- the task -------------------------------------------------------------------------------


class AgentTask:
    """One run of one task as an agent, from its records."""

    role_name: str  # the budgets' and the system prompt's role

    def __init__(self, run: TaskRun, choice: ProviderChoice, worker: str) -> None:
        self.run = run
        self.choice = choice
        self.worker = worker
        self.task = run.task
        self.state = run.state
        self.artifacts = run.state.artifacts(run.task.job_id)
        self.records = run.state.records(run.task.job_id)
        self.tok = tokenizer_for()
        self.input = (
            TaskInput.model_validate_json(self.artifacts.text(self.task.input))
            if self.task.input
            else None
        )
        saved = self.records.checkpoint(self.task.task_id)
        self.working = (
            WorkingState.model_validate_json(saved)
            if saved
            else WorkingState(goal=self.input.brief if self.input else run.job.goal)
        )
        self.journal = Journal(run, self.records, self.task.stage, self.effects())
        self.loop: AgentLoop | None = None

    # -- what a role defines -------------------------------------------------------------

    def perform(self) -> None:
        """Run this stage of the task to its end: completed, failed or handed off."""
        raise NotImplementedError

    def effects(self) -> list[EffectKind]:
        return [WriteFile(self), AppendFile(self), Spawn(self, "spawn_subagents")]

    @property
    def name(self) -> str:
        return self.input.name if self.input else self.task.role.value

    @property
    def script_key(self) -> str:
        """Which script a scripted provider replays for this run: role.name/stage."""
        kind = "subagent" if self.input and self.input.kind == "subagent" else self.task.role.value
        key = kind if not self.input else f"{kind}.{self.input.name}"
        stage = self.task.stage.split(".")[0]  # "review.2" replays "review"
        return f"{key}/{stage}" if stage else key

    def reference(self) -> str:
        """The task's header: stable for the whole run, so it stays in the cached prefix."""
        lines = [
            "TASK",
            f"role: {self.task.role.value}",
            f"name: {self.name}",
            f"stage: {self.task.stage or 'start'}",
            f"goal of the job: {self.run.job.goal}",
        ]
        if self.input:
            lines += [f"kind: {self.input.kind}", f"brief: {self.input.brief}"]
            refs = [self.artifacts.get(i) for i in self.input.inputs]
            if refs:
                lines += ["inputs (read them with the reader tools):", *(r.handle() for r in refs)]
        return "\n".join(lines)

    # -- running ------------------------------------------------------------------------------

    def drive(
        self, system: str, tools: Sequence[Tool], phase: str, opening: Sequence[Message] = ()
    ) -> AgentOutcome:
        """Run the loop in ``phase`` with the role's ``tools`` and those every role offers."""
        notes = self.journal.reconcile()
        if notes:
            facts = [(f"resumed; journal settled: {n}", "journal") for n in notes]
            self.working = self.working.apply_model_update(step=0, facts=facts)
        provider = self.choice.open(self.script_key)
        ledger = CallLedger(
            model=provider.model, job=Meter(self.state, self.task, self.worker, provider)
        )
        self.loop = AgentLoop(
            provider,
            ContextEngine(self.artifacts, budgets=ROLE_BUDGETS[self.role_name]),
            ToolBox(self.toolset(tools)),
            ledger=ledger,
            budget=self.state.budget(self.task.job_id),
            limits=AgentLimits(),
            on_step=self.checkpoint,
        )
        self.provider, self.ledger = provider, ledger
        return self.loop.run(
            system, self.working.with_phase(phase), list(opening), reference=self.reference()
        )

    def checkpoint(self, working: WorkingState) -> None:
        self.run.check()
        self.records.write(self.run.claim, checkpoint=working.model_dump_json())

    def remember(self, ref: ArtifactRef, name: str = "") -> None:
        """Put an artifact the task made into its working state (by name, if given)."""
        assert self.loop is not None and self.loop.state is not None
        state = self.loop.state.add_artifact(ref)
        self.loop.state = state.with_ref(name, ref.id) if name else state

    def track(self, counter: str, value: int) -> None:
        """Set a progress counter of the working state."""
        assert self.loop is not None and self.loop.state is not None
        self.loop.state = self.loop.state.with_progress(counter, value)

    def current(self) -> WorkingState:
        return self.loop.state if self.loop and self.loop.state else self.working

    def store(
        self,
        content: str,
        *,
        kind: str,
        title: str,
        trust: Trust = Trust.UNTRUSTED,
        source: str = "",
    ) -> ArtifactRef:
        """Store an artifact this task made (its source: this task, unless named)."""
        return self.artifacts.put(
            content,
            kind=kind,
            title=title,
            source=source or f"task:{self.task.task_id}",
            trust=trust,
        )

    def write_files(self, files: dict[str, str]) -> None:
        self.run.check()
        self.records.write(self.run.claim, files=files)

    def finish(self, text: str, *, refs: Sequence[str] = (), condense: bool = False) -> Summary:
        """Complete the task with its Summary (an artifact; the task keeps only its id)."""
        cap = self.input.summary_cap if self.input else DEFAULT_CAP
        kind = self.input.kind if self.input else "task"
        draft = Summary(
            task_id=self.task.task_id, name=self.name, kind=kind, text=text, refs=tuple(refs),
            cap=cap,
        )  # fmt: skip
        summary = capped(
            draft,
            tok=self.tok,
            sink=self.artifacts,
            condense=self._condense if condense else None,
        )
        ref = self.store(
            summary.model_dump_json(indent=1),
            kind="summary",
            title=f"{kind} {self.name}: {summary.tokens} of {cap} tokens",
        )
        self.run.complete(ref.id)
        return summary

    def _condense(self, text: str, tokens: int) -> str:
        """One more model call: the same answer in at most ``tokens`` tokens ('' if it fails)."""
        messages = [
            Message(
                role="system",
                content=f"Condense the text to at most {tokens} tokens. Keep every "
                "identifier, number, file name and artifact id; drop the rest.",
            ),
            Message(role="user", content=text),
        ]
        budget = self.state.budget(self.task.job_id)
        try:
            held = budget.reserve(self.tok.count_messages(messages) + tokens)
        except BudgetExceeded:
            return ""  # not sent; cutting, the fallback, always fits
        used = 0
        try:
            reply = self.provider.complete(messages, [], max_tokens=tokens)
            used = reply.usage.input_tokens + reply.usage.output_tokens
        except ProviderError:
            return ""  # cutting, the fallback, always fits
        finally:
            budget.settle(held, used)
        self.ledger.record_compaction(
            step=len(self.ledger.calls) + 1,
            input_tokens=reply.usage.input_tokens,
            output_tokens=reply.usage.output_tokens,
        )
        return reply.text

    # -- children --------------------------------------------------------------------------

    def dispatch(
        self, tool: str, wave: str, children: Sequence[tuple[Role, TaskInput]], args: BaseModel
    ) -> str:
        """Spawn children (journaled) and hand off: the task resumes at ``wave``."""
        self.checkpoint(self.current())

        def prepare() -> dict[str, Any]:
            specs = []
            for role, spec in children:
                ref = self.store(
                    spec.model_dump_json(),
                    kind="task-input",
                    title=f"{spec.kind} {spec.name}",
                    trust=Trust.TRUSTED,
                )
                specs.append({"role": role.value, "brief": spec.brief[:200], "input": ref.id})
            return {"wave": wave, "children": specs}

        return self.journal.perform(tool, wave, args.model_dump(), prepare)

    def results(self) -> list[Summary]:
        """The summaries of the children this task waited for (the wave it resumes at)."""
        children = self.state.tasks.children(self.task.job_id, self.task.task_id, self.task.stage)
        return [
            Summary.model_validate_json(self.artifacts.text(c.result)) for c in children if c.result
        ]

    def results_message(self) -> list[Message]:
        summaries = self.results()
        if not summaries:
            return []
        # Summaries are written by models that read untrusted inputs: data, not instructions.
        body = "\n\n".join(as_data(s.task_id, Trust.UNTRUSTED, s.render()) for s in summaries)
        return [Message(role="user", content=f"Results of the tasks you dispatched:\n\n{body}")]

    def check_inputs(self, ids: Sequence[str]) -> list[str]:
        for artifact_id in ids:
            self.artifacts.get(artifact_id)  # ArtifactNotFound goes back to the model
        return list(ids)

    # -- tools every role can offer ------------------------------------------------------------

    def toolset(self, tools: Sequence[Tool]) -> list[Tool]:
        """The role's tools and, last and in every phase, ``note`` (the tools slot stays stable)."""
        return [*tools, Tool.of("note", NOTE_DESCRIPTION, Note, self._note)]

    def _note(self, a: Note) -> str:
        """Write the model's note into the working state the loop holds (its own parts only)."""
        if a.kind == "fact":
            self._check_source(a.source)
        assert self.loop is not None and self.loop.state is not None
        room = ROLE_BUDGETS[self.role_name].state.notes // 2
        step = self.ledger.calls[-1].step  # the call whose answer made the note
        self.loop.state = write_note(self.loop.state, a, step=step, tok=self.tok, room=room)
        return f"noted {a.kind.replace('_', ' ')}"

    def _check_source(self, source: str) -> None:
        """A fact's source exists: "user", an artifact of the job or a file of its workspace."""
        if source == USER:
            return
        if ARTIFACT_ID.fullmatch(source):
            self.artifacts.get(source)  # ArtifactNotFound goes back to the model
            return
        if str(workspace_path(source)) not in self.records.files():
            raise ToolRefused(
                f"source {source!r} is neither an artifact id, a workspace file nor {USER!r}"
            )

    def reader_tools(self, phases_of: Mapping[str, Sequence[str]]) -> list[Tool]:
        """The named readers (and ``list_workspace``), each offered in the phases given for it."""
        store = self.artifacts
        # One read_lines shows as much as the results slot can: the rest of a result is one call.
        most = lines_budget(ROLE_BUDGETS[self.role_name].tokens(Slot.RESULTS))
        readers: dict[str, tuple[str, type[BaseModel], Callable[[Any], str]]] = {
            "read_lines": (
                "Read numbered lines start..end (1-based, inclusive) of an artifact.",
                ReadLines,
                lambda a: read_lines(store, a.id, a.start, a.end, max_tokens=most),
            ),
            "grep_artifact": (
                "Lines of an artifact matching a regular expression, numbered.",
                Grep,
                lambda a: grep_artifact(store, a.id, a.pattern),
            ),
            "extract_fields": (
                "Fields of a JSON artifact by dotted path (features.0.id).",
                Fields,
                lambda a: extract_fields(store, a.id, a.fields),
            ),
            "slim": (
                "A JSON artifact with only the given keys kept, at every depth.",
                Slim,
                lambda a: slim(store, a.id, a.keep),
            ),
        }
        tools = []
        for name, phases in phases_of.items():
            if name == "list_workspace":
                description = "The files the job's coders wrote: path and artifact handle."
                tools.append(Tool.of(name, description, NoArgs, self._workspace, phases=phases))
                continue
            description, arguments, read = readers[name]
            tools.append(Tool.of(name, description, arguments, self._reader(read), phases=phases))
        return tools

    def _reader(self, read: Callable[[Any], str]) -> Callable[[Any], str]:
        """A reader as a tool: untrusted text labelled as data, bad input told to the model."""

        def run(a: Any) -> str:
            ref = self.artifacts.get(a.id)
            try:
                return as_data(a.id, ref.trust, read(a))
            except ValueError as exc:
                raise ToolRefused(str(exc)) from exc

        return run

    def _workspace(self, _: NoArgs) -> str:
        files = self.records.files()
        if not files:
            return "the workspace is empty"
        return "\n".join(f"{p}: {self.artifacts.get(a).handle()}" for p, a in files.items())

    def file_tools(self, phases: Sequence[str]) -> list[Tool]:
        return [
            Tool.of(
                "write_file",
                "Write a whole file into the job's workspace (replaces it).",
                WriteArgs,
                self._write_file,
                phases=phases,
            ),
            Tool.of(
                "append_file",
                "Append text to a file of the workspace (creates it if missing); the same "
                "text appended twice in one stage is appended once.",
                AppendArgs,
                self._append_file,
                phases=phases,
            ),
        ]

    def _write_file(self, a: WriteArgs) -> str:
        path = str(workspace_path(a.path))
        ref = self.store(a.content, kind="file", title=path)
        self.remember(ref)  # also when the journal says it was written before a crash
        detail = {"path": path, "artifact": ref.id, "bytes": ref.bytes}
        return self.journal.perform("write_file", path, a.model_dump(), lambda: detail)

    def _append_file(self, a: AppendArgs) -> str:
        path = str(workspace_path(a.path))

        def prepare() -> dict[str, Any]:
            before = self.records.files().get(path, "")
            text = (self.artifacts.text(before) if before else "") + a.text
            ref = self.store(text, kind="file", title=path)
            return {"path": path, "before": before, "after": ref.id, "bytes": len(a.text.encode())}

        result = self.journal.perform("append_file", path, a.model_dump(), prepare)
        self.remember(self.artifacts.get(self.records.files()[path]))
        return result

    def subagent_tool(self, phases: Sequence[str], resume_at: str) -> Tool:
        def spawn(a: SpawnArgs) -> str:
            base = self.input.inputs if self.input else ()
            children = [
                (
                    self.task.role,
                    TaskInput(
                        kind="subagent",
                        name=b.name,
                        brief=b.brief,
                        inputs=(*base, *self.check_inputs(b.inputs)),
                        summary_cap=a.summary_cap,
                    ),
                )
                for b in a.agents
            ]
            return self.dispatch("spawn_subagents", resume_at, children, a)

        return Tool.of(
            "spawn_subagents",
            "Delegate research to subagents with clean contexts. Each gets a brief and "
            "input refs and returns a summary under summary_cap tokens; exact material "
            "comes back as artifact refs. This task waits for them, then resumes.",
            SpawnArgs,
            spawn,
            phases=phases,
            ends_run=True,
        )


# -- argument models ---------------------------------------------------------------------------


class NoArgs(BaseModel):
    pass


class ReadLines(BaseModel):
    id: ArtifactId
    start: int = Field(ge=1)
    end: int = Field(ge=1)


class Grep(BaseModel):
    id: ArtifactId
    pattern: str = Field(min_length=1)


class Fields(BaseModel):
    id: ArtifactId
    fields: list[str] = Field(min_length=1)


class Slim(BaseModel):
    id: ArtifactId
    keep: list[str] = Field(min_length=1)


class WriteArgs(BaseModel):
    path: str = Field(min_length=1, max_length=200)
    content: str


class AppendArgs(BaseModel):
    path: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1)


class SpawnArgs(BaseModel):
    agents: list[Brief] = Field(min_length=1, max_length=6)
    summary_cap: int = Field(default=DEFAULT_CAP, ge=200, le=20_000)
