"""``scripted``: a deterministic replay of a scenario, for tests, demos and benchmarks.

A scenario lists, per script key, what the model says at each step: text
and/or tool calls. A task's key is its role and name, and the stage it
resumes at (``coder.tests/resume``; the planner's are ``planner``,
``planner/review``, ``planner/report``). Token usage is computed with the
tokenizer from what is sent and what is returned, so budgets, kill switch
and metrics behave as with a real model; as cached it reports the tools and
leading messages it was sent unchanged on its previous call, which is what a
provider's prefix cache would serve. Output that comes from it is always
labelled ``scripted``.

Artifact ids are content hashes a script cannot know in advance: a string
argument ``$ref:<kind>`` is replaced by the id of the last artifact of that
kind whose handle appears in the messages sent — the model "reads" the id
from its context, as a real one would. A task whose name is numbered (a
batch's coder, ``coder.batch-7``) without a script of its own replays the
script of its pattern (``coder.batch-*``). Scenarios shipped with redfleet live
in ``scripts/`` (``load_scenario("demo")``).

``ScriptedSummaryModel`` stands in for a summary model (``--summary-model``
with the scripted provider): it answers every call with the first sentence
of each line it is asked to condense, up to the tokens allowed — the same
answer for the same call, whatever the scenario.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..context.engine import ToolSpec
from ..context.messages import Message, ToolCall
from ..context.summarizers import ExtractiveSummarizer
from ..context.tokens import tokenizer_for
from ..errors import ScenarioExhausted
from .base import ModelResponse, TokenUsage

TASK_HEADER = "TASK\nrole:"  # how the header of a task's prompt begins (roles/task.py)


def replay_of(texts: Sequence[str]) -> tuple[str, str]:
    """(the job's goal, the script key) of the task whose prompt holds ``texts``.

    What a server replaying a scenario over the wire needs (the tests' and
    benchmarks' loopback models): the key ``AgentTask.script_key`` gives,
    read back from the task header. StopIteration when no text holds one.
    """
    header = next(t for t in texts if TASK_HEADER in t)
    fields = dict(line.split(": ", 1) for line in header.splitlines() if ": " in line)
    role, name = fields["role"], fields["name"]
    # "review.2" replays "review", and so does a resumed round's "r1/review.2".
    stage = fields["stage"].rpartition("/")[2].split(".")[0]
    if "kind" not in fields:
        key = role  # the root task: the planner
    elif fields["kind"] == "subagent":
        key = f"subagent.{name}"
    else:
        key = f"{role}.{name}"
    return fields.get("goal of the job", ""), key if stage == "start" else f"{key}/{stage}"


class ScriptedCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ScriptedStep(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str = ""
    tool_calls: tuple[ScriptedCall, ...] = ()


class Scenario(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    roles: dict[str, tuple[ScriptedStep, ...]]

    @classmethod
    def from_file(cls, path: str | Path) -> Scenario:
        return cls.model_validate(json.loads(Path(path).read_text()))


SCRIPTS = Path(__file__).parent / "scripts"
_REF = "$ref:"


def load_scenario(name_or_path: str) -> Scenario:
    """A scenario shipped with redfleet (``demo``), or a scenario file's path."""
    path = Path(name_or_path)
    if path.suffix != ".json":
        path = SCRIPTS / f"{name_or_path}.json"
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in SCRIPTS.glob("*.json")))
        raise ValueError(f"no scenario {name_or_path!r} (shipped: {shipped}; or a .json path)")
    try:
        return Scenario.from_file(path)
    except ValidationError as exc:  # JSON of the wrong shape: its first problem, in one line
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "top level"
        raise ValueError(f"{path}: {where}: {first['msg']}") from exc


def _resolve(value: Any, sent: str) -> Any:
    """Replace ``$ref:<kind>`` strings with the last such artifact id seen in ``sent``."""
    if isinstance(value, str) and value.startswith(_REF):
        kind = value.removeprefix(_REF)
        found = re.findall(rf"\[artifact (a-[0-9a-f]+) {re.escape(kind)} ", sent)
        return found[-1] if found else value
    if isinstance(value, dict):
        return {k: _resolve(v, sent) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, sent) for v in value]
    return value


def _refused(messages: Sequence[Message]) -> str:
    """Why a replay ran out, when its last step was refused: the tool's error (a script
    written for another job cannot adapt, as a model would, and asks for a step more)."""
    from ..tools.tool import REFUSED  # the tools load with the roles; asked only here

    for message in reversed(messages):
        if not message.is_tool_result:
            return ""  # the results of the last step only
        if message.content.startswith(REFUSED):
            return (
                f"; its last step's {message.name} was refused"
                f" ({' '.join(message.content.split())[:300]})"
                ": a replay cannot adapt to a job it was not written for (run a model, or a"
                " scenario written for the job)"
            )
    return ""


class ScriptedProvider:
    name = "scripted"

    def __init__(self, scenario: Scenario, key: str) -> None:
        # Numbered tasks (a job's batches: coder.batch-7) share one script, coder.batch-*.
        pattern = re.sub(r"[0-9]+", "*", key)
        if key not in scenario.roles and pattern not in scenario.roles:
            known = ", ".join(sorted(scenario.roles))
            raise ScenarioExhausted(
                f"scripted scenario {scenario.name!r} has no script for {key!r} (has: {known})"
            )
        key = key if key in scenario.roles else pattern
        self.model = f"scripted:{scenario.name}"
        self.scenario = scenario
        self.key = key
        self.step = 0
        self.tok = tokenizer_for()
        self._last: tuple[list[str], list[Message]] = ([], [])

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, max_tokens: int
    ) -> ModelResponse:
        steps = self.scenario.roles[self.key]
        if self.step >= len(steps):
            raise ScenarioExhausted(
                f"scripted scenario {self.scenario.name!r}: {self.key} has "
                f"{len(steps)} steps, step {self.step + 1} was asked for{_refused(messages)}"
            )
        planned = steps[self.step]
        sent_text = "\n".join(m.text() for m in messages)
        calls = tuple(
            ToolCall(
                id=f"call_{self.key}_{self.step}_{i}",
                name=c.name,
                arguments=_resolve(c.arguments, sent_text),
            )
            for i, c in enumerate(planned.tool_calls)
        )
        self.step += 1
        reply = Message(role="assistant", content=planned.text, tool_calls=calls)
        schemas = [t.schema_text for t in tools]
        sent = self.tok.count_messages(list(messages)) + sum(map(self.tok.count, schemas))
        cached = self._cached(schemas, list(messages))
        return ModelResponse(
            text=planned.text,
            tool_calls=calls,
            usage=TokenUsage(
                input_tokens=sent,
                cached_tokens=cached,
                output_tokens=min(self.tok.count_message(reply), max_tokens),
            ),
            provider=self.name,
            model=self.model,
            stop_reason="tool_use" if calls else "end_turn",
        )

    def _cached(self, schemas: list[str], messages: list[Message]) -> int:
        """What a provider's prefix cache would serve: tools and leading messages as last time."""
        last_schemas, last_messages = self._last
        self._last = (schemas, messages)
        if schemas != last_schemas or not last_messages:
            return 0
        cached = sum(map(self.tok.count, schemas))
        for before, now in zip(last_messages, messages, strict=False):
            if before != now:
                break
            cached += self.tok.count_message(now)
        return cached


class ScriptedSummaryModel:
    """A deterministic summary model: extractive answers, usage counted by the tokenizer."""

    name = "scripted"

    def __init__(self, model: str) -> None:
        self.model = model  # the summary model's name, as configured
        self.tok = tokenizer_for()

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, max_tokens: int
    ) -> ModelResponse:
        asked = next((m.content for m in reversed(messages) if m.role == "user"), "")
        lines = [Message(role="user", content=line) for line in asked.splitlines() if line]
        text = ExtractiveSummarizer(self.tok).summarize("", lines, max_tokens).text
        return ModelResponse(
            text=text,
            tool_calls=(),
            usage=TokenUsage(
                input_tokens=self.tok.count_messages(list(messages)),
                cached_tokens=0,
                output_tokens=self.tok.count(text),
            ),
            provider=self.name,
            model=self.model,
            stop_reason="end_turn",
        )
