"""A tool: one object, and what it returns, typed.

A ``Tool`` holds its name, description, argument model and function
together; the function gets the task's ``RunContext`` and the validated
arguments, and returns a ``ToolResult``: the text the model reads, the
artifacts the call made (typed refs: they land in the working state as they
are, no text is parsed back), whether it ends the run, and whether the text
shows only part of what the call produced. A tool that refuses its input
raises ``ToolRefused`` (or a ``NotFound``); the ``ToolBox`` turns that, an
unknown tool, one of another phase and arguments that do not fit into a
result marked ``error`` for the model to act on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import pydantic
from pydantic import BaseModel, ConfigDict

from shared_state import ArtifactRef, NotFound

from ..context.engine import ToolSpec
from ..context.messages import Message, ToolCall
from ..errors import ToolRefused

if TYPE_CHECKING:
    from ..run_context import RunContext


REFUSED = "error: "  # how a refused call's result starts, as the model reads it


class ToolResult(BaseModel):
    """What a tool call gives back."""

    model_config = ConfigDict(frozen=True)

    content: str  # what the model reads
    refs: tuple[ArtifactRef, ...] = ()  # artifacts the call made, for the working state
    ends_run: bool = False  # the run is over: the task handed off or delivered its result
    reduced: bool = False  # ``content`` is part of what the call made; the whole is in ``refs``
    error: bool = False  # the call was refused; counted against the run's tool errors

    @classmethod
    def refused(cls, reason: str) -> ToolResult:
        return cls(content=f"{REFUSED}{reason}", error=True)

    def message(self, call: ToolCall) -> Message:
        """The tool message answering ``call``.

        A result that is only a part is marked cut, as the engine marks its own
        cuts: it is not cut again before the model sees it, only cleared after.
        """
        return Message(
            role="tool",
            content=self.content,
            tool_call_id=call.id,
            name=call.name,
            reduced="cut" if self.reduced else "",
        )


@lru_cache(maxsize=1024)  # tools are defined in code: a bounded set, bounded anyway
def _spec(
    name: str,
    description: str,
    arguments: type[BaseModel],
    phases: frozenset[str],
    keeps_arguments: bool,
) -> ToolSpec:
    """A tool's spec, made once per process: every run builds its tools again, and the
    argument model's JSON schema (pydantic's generation) and its text are most of what that
    costs. Shared by every run that offers the tool: frozen, its schema read, never changed."""
    return ToolSpec(name, description, arguments.model_json_schema(), phases, keeps_arguments)


class Tool:
    """A tool the model may call: name, description, argument model and function."""

    def __init__(
        self,
        name: str,
        description: str,
        arguments: type[BaseModel],
        function: Callable[[RunContext, Any], ToolResult],
        *,
        phases: Iterable[str] = (),
        keeps_arguments: bool = True,
    ) -> None:
        self.name = name
        self.arguments = arguments
        self.function = function
        # Made once: the tools slot is the same bytes in every call of a phase.
        self.spec = _spec(name, description, arguments, frozenset(phases), keeps_arguments)

    def run(self, context: RunContext, call: ToolCall) -> ToolResult:
        """The call's result; a refusal of its input is a result marked ``error``."""
        try:
            arguments = self.arguments.model_validate(call.arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            return ToolResult.refused(f"bad arguments for {call.name}: {problems}")
        try:
            result = self.function(context, arguments)
        except (ToolRefused, NotFound) as exc:
            return ToolResult.refused(f"{call.name}: {exc}")
        if not isinstance(result, ToolResult):
            raise TypeError(f"tool {self.name} returned {type(result).__name__}, not a ToolResult")
        return result


class ToolBox:
    """The tools of one run, by name; each call answered with a ``ToolResult``."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self.tools = {t.name: t for t in tools}
        if len(self.tools) != len(tools):
            names = [t.name for t in tools]
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"tool names must be unique; given twice: {', '.join(twice)}")

    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self.tools.values()]

    def call(self, call: ToolCall, context: RunContext) -> ToolResult:
        """The tool's result, or an error the model can act on (phase: the context's)."""
        if call.invalid:
            return ToolResult.refused(f"tool call {call.name!r} rejected: {call.invalid}")
        phase = context.state.phase
        offered = [n for n, t in self.tools.items() if not t.spec.phases or phase in t.spec.phases]
        if call.name not in offered:
            known = ", ".join(sorted(offered))
            return ToolResult.refused(
                f"no tool {call.name!r} in phase {phase!r}; available: {known}"
            )
        return self.tools[call.name].run(context, call)
