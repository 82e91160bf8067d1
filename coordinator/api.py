"""The Python API for the common path: submit a job, wait for it, read what it made.

A program drives a fleet without shelling out to the CLI (the CLI uses this
module itself). The fleet runs elsewhere (`redfleet up`); a ``Client`` only
talks to its Redis::

    from coordinator.api import Client

    with Client.connect() as client:  # REDIS_URL, else the embedded server
        job_id = client.submit("write a greeting module")
        job = client.wait(job_id, timeout=300, on_progress=print)
        print(job.status, client.status(job_id)["usage"])
        for ref in client.artifacts(job_id):
            print(ref.id, ref.kind, ref.title)
            text = client.show(ref.id, job_id=job_id)

- ``submit(goal, ...) -> job_id``: what `redfleet submit` does.
- ``wait(job_id, timeout=None, on_progress=None) -> Job``: blocks until the
  job has finished (succeeded, failed or cancelled: see ``Job.status``), or
  raises ``WaitTimeout`` (the job is not cancelled). ``on_progress`` gets a
  ``Progress`` at the start, at every change and at the end.
- ``follow(job_id)``: the job's events as they arrive; it ends once the job
  has finished and its final events are yielded (`redfleet logs -f JOB`).
- ``status(job_id) -> dict``: the document `redfleet status JOB --json`
  prints: the job, its tasks (with lease renewal counts), usage, and the
  providers its model calls went to.
- ``artifacts(job_id) -> list[ArtifactRef]``, ``show(artifact_id) -> str``.
- ``set_project_memory(text, tenant=...)``: the tenant's AGENTS.md, which its
  jobs read at start (`submit --memory-file`).
- ``import_workspace(path, tenant=..., include=..., exclude=...) -> ImportReport``:
  a folder or git repository stored as the tenant's workspace tree (only the
  files Redis lacks are sent); ``submit(..., workspace=path or report)`` gives a
  job those files (`submit --workspace`).
- ``cancel``, ``retry``, ``resume``, ``approve``, ``reject``, ``handoff``: what the
  commands of those names do.
- ``Client.connect(tenant=...)``: a client that reads and acts for one tenant only
  (another tenant's job is ``JobNotFound``).
- ``diff(job_id) -> list[FileDiff]``: what a job changed against its workspace
  (`redfleet diff`); ``apply(job_id, repo, branch=..., three_way=...) -> Applied``:
  those changes as a new branch of the repository, a commit per passing feature
  (`redfleet apply`).

Errors are ``shared_state.StateError`` (``JobNotFound``, ``ConnectionFailed``,
…) and ``CoordinatorError`` (``WaitTimeout``).
"""

from __future__ import annotations

import getpass
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared_state import ArtifactRef, Event, Job, JobSpec, Scenario, State, TaskStatus
from shared_state.names import check_name
from workers.errors import ToolRefused

from . import views
from .connection import open_state
from .errors import CoordinatorError
from .importer import ImportProgress, ImportReport, import_workspace
from .patch import FileDiff, diff
from .settings import Settings

if TYPE_CHECKING:  # the agent runtime's modules load with the commands that use them
    from workers.handoff import HandoffPackage
    from workers.resume import ResumePlan

    from .apply import Applied

RENEWED = "task.renewed"
_UNSUCCEEDED = (TaskStatus.DEAD, TaskStatus.CANCELLED)
_SETTLED = (TaskStatus.SUCCEEDED, *_UNSUCCEEDED)
_POLL_MS = 500  # how long one read waits for events before the job is looked at again


def operator() -> str:
    """Who acts from this machine, for the records: ``cli:<login name>``."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry (a bare container)
        return "cli:unknown"


def acting_tenant(given: str | None, scope: str | None) -> str:
    """The tenant a submit or import acts for: ``given``, else ``scope`` (the one tenant a
    client is for, if it is for one), else default. ``CoordinatorError`` for a name that
    is not one, or another tenant than ``scope``."""
    if given is not None and scope is not None and given != scope:
        raise CoordinatorError(f"tenant: this client acts for tenant {scope!r} only, not {given!r}")
    try:
        return check_name(given or scope or "default", "tenant")
    except ValueError as exc:
        raise CoordinatorError(f"--tenant: {exc}") from None


def job_spec(
    goal: str,
    *,
    settings: Settings,
    scenario: Scenario = Scenario.AGENTS,
    fanout: int = 3,
    max_attempts: int | None = None,
    token_budget: int = 0,
    tenant: str = "default",
    user: str = "default",
    idempotency_key: str = "",
    workspace: ImportReport | None = None,
    check: str = "",
    approve: tuple[str, ...] = (),
    priority: int = 0,
    budget_usd: float = 0.0,
) -> JobSpec:
    """The job ``Client.submit`` queues for these arguments (its own), checked: a bad one
    raises here, before anything is sent — ``CoordinatorError`` for ``approve`` and
    ``check``, pydantic's ``ValidationError`` naming the field for the rest."""
    from workers.roles import APPROVABLE
    from workers.sandbox import command_args

    unknown = sorted(set(approve) - APPROVABLE)
    if unknown:
        raise CoordinatorError(
            f"--approve: {unknown[0]!r} is not a tool that acts; one of "
            f"{', '.join(sorted(APPROVABLE))}"
        )
    if check:
        try:
            command_args(check)  # {item} only as an argument of its own: refused now
        except ToolRefused as exc:
            raise CoordinatorError(f"--check: {exc}") from exc
    return JobSpec(
        goal=goal,
        scenario=scenario,
        fanout=fanout,
        max_attempts=settings.max_attempts if max_attempts is None else max_attempts,
        token_budget=token_budget,
        tenant=tenant,
        user=user,
        idempotency_key=idempotency_key,
        workspace=workspace.tree if workspace else "",
        workspace_commit=workspace.commit if workspace else "",
        check=check,
        approve=",".join(approve),
        priority=priority,
        budget_usd=budget_usd,
    )


class WaitTimeout(CoordinatorError):
    """The job had not finished when the wait gave up; it was not cancelled."""

    def __init__(self, job_id: str, timeout_s: float) -> None:
        super().__init__(
            f"gave up waiting for job {job_id} after {timeout_s:g} s; it was not cancelled "
            f"(`redfleet status {job_id}`, `redfleet cancel {job_id}`)"
        )
        self.job_id = job_id
        self.timeout_s = timeout_s


@dataclass(frozen=True)
class Progress:
    """Where a job is: what ``wait`` reports at each change."""

    job_id: str
    status: str
    done: int  # tasks settled: succeeded, dead or cancelled
    total: int
    stage: str  # the root (planner) task's stage: start, review, report, …
    running: dict[str, int]  # claimed tasks by role
    tokens: int  # input + output tokens of every model call so far
    cost_usd: float
    blocked: dict[str, str] = field(default_factory=dict)  # task id -> its question
    # The planner waits for its children: ``stage`` is the one it resumes at, not one running.
    stage_next: bool = False
    # A job over many items: total, pending, done, validated, failed (as of the planner's
    # last stage: the counts move when it merges a wave's reports or the checks).
    items: dict[str, int] = field(default_factory=dict)
    # Of ``done``, those that did not succeed, by status (dead, cancelled).
    unsucceeded: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        """One line for people (``one_line`` it before printing: the stage is a worker's)."""
        running = ", ".join(f"{role} {n}" for role, n in self.running.items()) or "none"
        settled = f"{self.done}/{self.total} tasks done"
        if self.unsucceeded:  # "done" alone would read as succeeded
            others = ", ".join(f"{n} {status}" for status, n in self.unsucceeded.items())
            settled = f"{self.done}/{self.total} tasks ended ({others})"
        line = (
            f"job {self.job_id} {self.status}: {settled}, "
            f"{'next stage' if self.stage_next else 'stage'} {self.stage}, "
            f"running {running}, {self.tokens} tokens, "
            f"${self.cost_usd:.4f}"
        )
        if self.items:
            i = self.items
            line += (
                f", items {i['done'] + i['validated']}/{i['total']} done "
                f"({i['validated']} validated, {i['failed']} failed)"
            )
        for task_id, question in self.blocked.items():
            line += f"; {task_id} asks: {question} (redfleet approve {self.job_id} {task_id})"
        return line


class Client:
    """One connection to a fleet's Redis; close it, or use it as a context manager."""

    def __init__(self, state: State, *, settings: Settings | None = None) -> None:
        self.state = state
        self.settings = settings or Settings()

    @classmethod
    def connect(
        cls,
        redis_url: str | None = None,
        *,
        settings: Settings | None = None,
        tenant: str | None = None,
    ) -> Client:
        """Connect to ``redis_url``, else REDIS_URL, else the embedded server.

        With ``tenant`` (else REDFLEET_TENANT), the client reads and acts for
        that tenant only: another's job is ``JobNotFound``. The embedded server
        is started if need be; ``ConnectionFailed`` if Redis does not answer.
        """
        settings = settings or Settings()
        if tenant is not None:
            try:
                settings = settings.model_copy(update={"tenant": check_name(tenant, "tenant")})
            except ValueError as exc:
                raise CoordinatorError(f"tenant: {exc}") from None
        return cls(open_state(settings, redis_url), settings=settings)

    def tenant(self, given: str | None = None) -> str:
        """The tenant a submit or import acts for: ``given``, else this client's, else default.

        A client scoped to one tenant refuses to act for another.
        """
        return acting_tenant(given, self.state.tenant)

    def close(self) -> None:
        self.state.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the common path -------------------------------------------------------------

    def submit(
        self,
        goal: str,
        *,
        scenario: Scenario = Scenario.AGENTS,
        fanout: int = 3,
        max_attempts: int | None = None,
        token_budget: int = 0,
        tenant: str | None = None,
        user: str = "default",
        idempotency_key: str = "",
        workspace: Path | ImportReport | None = None,
        check: str = "",
        approve: tuple[str, ...] = (),
        priority: int = 0,
        budget_usd: float = 0.0,
    ) -> str:
        """Queue a job for any fleet on this Redis; its id.

        ``max_attempts`` defaults to REDFLEET_MAX_ATTEMPTS (else 3); the other
        arguments are those of `redfleet submit`. With ``idempotency_key``, a
        submit repeated with the same key (and tenant) returns the first job's
        id instead of creating another: safe to retry after a lost reply.
        ``workspace``: a folder or repository (imported now, whole) or what
        ``import_workspace`` returned; ``check``: the workspace's own check
        command, run by the reviewer over the job's files; ``approve``: tools
        (``APPROVABLE``) whose every call waits for ``approve`` before it is made;
        ``priority``: 0-9, its model calls' place (higher first) while a route is busy;
        ``budget_usd``: what all its calls may cost, at their routes' prices (0: no limit).
        """
        tenant = self.tenant(tenant)
        spec = job_spec(  # every field checked before a folder is imported
            goal,
            settings=self.settings,
            scenario=scenario,
            fanout=fanout,
            max_attempts=max_attempts,
            token_budget=token_budget,
            tenant=tenant,
            user=user,
            idempotency_key=idempotency_key,
            workspace=workspace if isinstance(workspace, ImportReport) else None,
            check=check,
            approve=approve,
            priority=priority,
            budget_usd=budget_usd,
        )
        if isinstance(workspace, Path):
            imported = self.import_workspace(workspace, tenant=tenant)
            spec = spec.model_copy(
                update={"workspace": imported.tree, "workspace_commit": imported.commit}
            )
        return self.state.jobs.submit(spec).job_id

    def cancel(self, job_id: str, *, reason: str = "cancelled by user") -> None:
        """Cancel a job that has not finished (``JobFinished`` if it has): its workers stop at
        their next renewal or write; its handoff package is written, as for any end."""
        from workers import handoff

        self.state.jobs.cancel(job_id, reason)
        handoff.job_ended(self.state, job_id)

    def retry(
        self, job_id: str, *, token_budget: int | None = None, budget_usd: float | None = None
    ) -> list[str]:
        """Run a failed job again from where it stopped, with the same id: its dead tasks
        (and those its end cancelled) get fresh attempts; the ids requeued.

        ``token_budget`` / ``budget_usd``: the job's budgets from now on (0: none), set
        before it runs — a job its budget stopped goes on with a raised one.
        """
        if token_budget is not None or budget_usd is not None:
            job = self.state.jobs.get(job_id)  # JobNotFound before anything is set
            if not job.status.finished:
                raise CoordinatorError(f"{job_id}: it is {job.status.value}; retry a failed job")
            self.state.budget(job_id).raise_to(tokens=token_budget, usd=budget_usd)
        return self.state.jobs.retry(job_id)

    def resume(
        self,
        job_id: str,
        *,
        goal: str | None = None,
        constraints: list[str] | None = None,
        max_evidence_age_ms: int | None = None,
        dry_run: bool = False,
    ) -> tuple[ResumePlan, str]:
        """Check a finished job's features against its records and start a new round for
        those that need one (`redfleet resume`): the checks, and the stage the round
        started at ("" when nothing was started: ``dry_run``, or every feature keeps its
        evidence)."""
        from workers import resume

        found = resume.plan(
            self.state,
            job_id,
            goal=goal,
            constraints=constraints,
            max_evidence_age_ms=max_evidence_age_ms,
        )
        return found, "" if dry_run else resume.start(self.state, found)

    def handoff(self, job_id: str) -> HandoffPackage:
        """What the next person or agent continues the job from, built from its records now."""
        from workers import handoff

        return handoff.build(self.state, job_id)

    def approve(
        self, job_id: str, task_id: str, *, note: str = "", by: str = "", asked: str = ""
    ) -> None:
        """Let a blocked task go on: the call it asked about is made (or, for an effect an
        earlier attempt left unsettled, made again); ``note`` reaches it as a user turn.
        ``by`` is recorded as who decided (default: this machine's operator); ``asked``,
        the ``approval_for`` of the question decided on, refuses a decision on a question
        the task no longer asks (``QuestionChanged``)."""
        self.state.jobs.get(job_id)  # an unknown job is named as such, not as an unknown task
        self.state.tasks.decide(
            job_id, task_id, approve=True, note=note, by=by or operator(), asked=asked
        )

    def reject(
        self, job_id: str, task_id: str, *, note: str, by: str = "", asked: str = ""
    ) -> None:
        """End a blocked task: it is dead with ``note`` as its error, and its job fails."""
        if not note.strip():
            raise CoordinatorError("--note: say why the task is rejected")
        self.state.jobs.get(job_id)
        self.state.tasks.decide(
            job_id, task_id, approve=False, note=note, by=by or operator(), asked=asked
        )

    def diff(self, job_id: str) -> list[FileDiff]:
        """What the job changed against the workspace it was submitted with, by path."""
        return diff(self.state.workspace(job_id))

    def apply(
        self, job_id: str, repo: Path, *, branch: str = "", three_way: bool = False
    ) -> Applied:
        """The job's changes as a new branch of ``repo`` (``ApplyRefused`` says why not)."""
        from .apply import apply_job

        return apply_job(self.state, job_id, repo, branch=branch, three_way=three_way)

    def import_workspace(
        self,
        path: Path,
        *,
        tenant: str | None = None,
        include: tuple[str, ...] = (),
        exclude: tuple[str, ...] = (),
        progress: ImportProgress | None = None,
    ) -> ImportReport:
        """Store a folder's (or a git repository's HEAD's) files as ``tenant``'s workspace
        tree; only the files Redis lacks are sent. ``ImportRefused`` names a file refused."""
        return import_workspace(
            self.state.client,
            self.tenant(tenant),
            path,
            include=include,
            exclude=exclude,
            limits=self.settings.import_limits(),
            progress=progress,
        )

    def set_project_memory(self, text: str, *, tenant: str | None = None) -> str:
        """Store ``text`` as the tenant's project memory (AGENTS.md); its sha256.

        Every job of the tenant reads it at start, in its stable prompt prefix.
        """
        from shared_state.memory import MemoryContext
        from shared_state.memory.files import PROJECT_MEMORY, MemoryFiles

        ctx = MemoryContext(tenant=self.tenant(tenant), actor=operator())
        return (
            MemoryFiles(self.state.client).create(ctx, PROJECT_MEMORY, text, operator=True).sha256
        )

    def wait(
        self,
        job_id: str,
        timeout: float | None = None,
        on_progress: Callable[[Progress], object] | None = None,
    ) -> Job:
        """Block until the job has finished; the finished job, whatever its status.

        Wakes on the job's events (lease renewals do not count as a change).
        ``WaitTimeout`` after ``timeout`` seconds; the job goes on.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        shown: Progress | None = None
        for batch in self._batches(job_id, self._tail(job_id)):
            if on_progress and (not batch or any(e.event != RENEWED for e in batch)):
                progress = self.progress(job_id)
                if progress != shown:
                    on_progress(progress)
                    shown = progress
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(job_id, timeout or 0)
        if on_progress and (progress := self.progress(job_id)) != shown:
            on_progress(progress)
        return self.state.jobs.get(job_id)

    def follow(
        self, job_id: str, *, after: str = "$", hide: frozenset[str] = frozenset()
    ) -> Iterator[Event]:
        """The job's events after stream id ``after`` as they arrive, but those in ``hide``.

        Ends once the job has finished, after the events written by then (the
        job's end among them).
        """
        for batch in self._batches(job_id, after):
            yield from (e for e in batch if e.event not in hide)

    def status(self, job_id: str) -> dict[str, Any]:
        """The job, its tasks and usage, and ``providers``: {"provider model": calls}.

        The providers are counted from the job's ``model.called`` events (one
        read of its stream, capped at REDFLEET_JOB_STREAM_MAXLEN entries).
        """
        doc = views.job_doc(self.state, self.state.jobs.get(job_id))
        doc["providers"] = self.providers(job_id)
        return doc

    def providers(self, job_id: str) -> dict[str, int]:
        """How many of the job's model calls went to each provider, as ``provider model``."""
        self.state.jobs.check(job_id)
        calls: Counter[str] = Counter()
        for event in self.state.events.scan(job_id, "model.called"):
            extra = event.model_extra or {}
            calls[" ".join(x for x in (extra.get("provider", "?"), extra.get("model")) if x)] += 1
        return dict(calls)

    def progress(self, job_id: str) -> Progress:
        job = self.state.jobs.get(job_id)
        tasks = self.state.tasks.list(job_id)
        usage = self.state.usage(job_id).get()
        root = next((t for t in tasks if t.task_id == job.root_task), None)
        running = Counter(t.role.value for t in tasks if t.status is TaskStatus.CLAIMED)
        return Progress(
            job_id=job_id,
            status=job.status.value,
            done=sum(t.status in _SETTLED for t in tasks),
            total=len(tasks),
            stage=(root.stage if root else "") or "start",
            running=dict(sorted(running.items())),
            tokens=usage.input_tokens + usage.output_tokens,
            cost_usd=usage.cost_usd,
            blocked={t.task_id: t.question for t in tasks if t.status is TaskStatus.BLOCKED},
            stage_next=root is not None and root.status is TaskStatus.WAITING,
            items=views.item_counts(self.state, job_id),
            unsucceeded=dict(
                sorted(Counter(t.status.value for t in tasks if t.status in _UNSUCCEEDED).items())
            ),
        )

    def artifacts(self, job_id: str) -> list[ArtifactRef]:
        """The job's artifacts (JobNotFound for an unknown job, not an empty list)."""
        self.state.jobs.get(job_id)
        return self.state.artifacts(job_id).list()

    def show(self, artifact_id: str, *, job_id: str | None = None) -> str:
        """An artifact's content, exactly; without ``job_id`` every kept job (of this
        client's tenant, when it has one) is searched."""
        return self.state.artifacts(job_id or self.state.locate_artifact(artifact_id)).text(
            artifact_id
        )

    # -- reading the job's stream ------------------------------------------------------

    def _tail(self, job_id: str) -> str:
        last = self.state.events.read(job_id, last=1)
        return last[-1].id if last else "0-0"

    def _batches(self, job_id: str, after: str) -> Iterator[list[Event]]:
        """The job's new events in batches, an empty one each poll without any.

        The job is looked at before each read: once it has finished, every
        event already written is yielded (the script that finished it wrote
        its end with the status) and the iteration ends.
        """
        events = self.state.events
        if after == "$":  # a fixed id: "$" again at each read would miss what came between
            after = self._tail(job_id)
        while True:
            if self.state.jobs.get(job_id).status.finished:
                while batch := events.read_after(job_id, after):
                    after = batch[-1].id
                    yield batch
                return
            batch = events.read_after(job_id, after, block_ms=_POLL_MS)
            if batch:
                after = batch[-1].id
            yield batch
