"""The provider seam: messages and tools in; text, tool calls and usage out.

Backends: ``openai`` (OpenAI-compatible chat completions — also vLLM, Ollama,
llama.cpp and LM Studio servers), ``anthropic`` (messages API with prompt
caching) and ``scripted`` (a deterministic replay for tests, demos and
benchmarks). HTTP backends share ``HttpJson``: a timeout, and one clear
error for a bad key, an unknown model or a rejected request. In a fleet,
every call is admitted by its route's shared limits and a 429, an overload
or an outage cools the route for the whole fleet and waits
(``shared_state.admission``); alone (no route), bounded retries with
exponential backoff, honouring ``Retry-After``, on 429, 5xx and connection
errors.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

from shared_state.admission import MAX_WAIT_S, Outcome, Route, Routes, outcome_of, route_id
from shared_state.errors import AdmissionTimedOut
from shared_state.redact import redact

from ..context.engine import ToolSpec
from ..context.messages import Message, ToolCall
from ..errors import AuthError, BadRequest, ModelNotFound, ProviderUnavailable
from .transport import Reply, Transport, TransportError, shared_transport


def _json(value: Any) -> str:
    """UTF-8-ready and compact; NaN is not JSON: refused here, not by the provider."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class WireTools:
    """A provider's tools as its API takes them, as JSON, each tool's made once.

    The tools are most of a call's request, the same in every call of a phase; a
    ``ToolSpec`` is made once per tool and lives as long as the process
    (``tools.tool._spec``), so its JSON is kept by the spec's identity (the spec held
    beside it: its id cannot be another's while kept), a bounded number of them.
    """

    KEPT = 4_096

    def __init__(self, wire: Callable[[ToolSpec], dict[str, Any]]) -> None:
        self.wire = wire
        self._made: dict[int, tuple[ToolSpec, str]] = {}

    def __call__(self, tools: Sequence[ToolSpec]) -> str:
        parts = []
        for spec in tools:
            made = self._made.get(id(spec))
            if made is None or made[0] is not spec:
                if len(self._made) >= self.KEPT:
                    self._made.clear()
                made = self._made[id(spec)] = (spec, _json(self.wire(spec)))
            parts.append(made[1])
        return f"[{','.join(parts)}]"


@dataclass(frozen=True)
class TokenUsage:
    input_tokens: int  # all input, cached included
    cached_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class ModelResponse:
    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: TokenUsage
    provider: str
    model: str
    stop_reason: str = ""
    route: str = ""  # the route that answered (``admission.route_id``), "" none
    served_by: str = ""  # the model asked, as configured (what its price is listed under)

    def message(self) -> Message:
        return Message(role="assistant", content=self.text, tool_calls=self.tool_calls)


class Provider(Protocol):
    name: str
    model: str

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], *, max_tokens: int
    ) -> ModelResponse: ...


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    timeout_s: float = 60.0

    def delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(float(retry_after), self.max_delay_s)
            except ValueError:
                pass  # an HTTP date: fall back to our own backoff
        backoff = self.base_delay_s * 2 ** (attempt - 1)
        return min(backoff, self.max_delay_s) * (0.5 + random.random() / 2)


def _no_usage(body: dict[str, Any]) -> int:
    return 0


@dataclass
class HttpJson:
    """POST JSON with bounded retries; errors mapped to the provider errors.

    With a ``route`` (``shared_state.admission``), every attempt is admitted by
    the fleet's shared limits first and settled after, and a 429, an overload
    or no answer cools the route for every process and waits (up to
    ``admission.MAX_WAIT_S``) instead of using up the attempts: the task's
    attempt is never spent on a provider's limit or outage.
    """

    provider: str
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    transport: Transport | None = None  # the process's (``shared_transport``) by default
    route: Route | None = None
    max_wait_s: float = MAX_WAIT_S  # the longest a call waits for its route (a fallback's bound)
    tenant: str = "default"  # whose job: its share of the route while calls wait
    priority: int = 0  # the job's priority (0-9, higher first)

    def post(
        self,
        url: str,
        payload: dict[str, Any],
        headers: dict[str, str],
        *,
        tokens: int = 0,
        used: Callable[[dict[str, Any]], int] = _no_usage,
        encoded: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """The reply's JSON; else a ProviderError whose message holds no credential.

        ``tokens``: the call's estimate, admitted against the route's limits;
        ``used``: the tokens a reply says it used, charged when it settles;
        ``encoded``: members of the request already JSON (``WireTools``), after
        ``payload``'s own.

        A provider or proxy may quote the key it refused in its error body: every
        message is redacted here, where the text enters, with the key this call
        sent masked whatever its shape (and before any cut, so no part of it
        survives) — it goes on to a task's reason, events and every view of them.
        """
        transport = self.transport or shared_transport()
        text = _json(payload)
        if encoded:
            members = "".join(f",{_json(k)}:{v}" for k, v in encoded.items())
            text = f"{text[:-1]}{members}}}" if payload else f"{{{members[1:]}}}"
        body = text.encode()
        sent = _credentials(headers)
        if self.route is not None:
            return self._admitted(self.route, transport, url, body, headers, tokens, used)
        last = ""
        for attempt in range(1, self.retry.attempts + 1):
            try:
                resp = transport.post(url, body, headers, self.retry.timeout_s)
            except TransportError as exc:
                last, retry_after = f"{type(exc).__name__}: {exc}", None
            else:
                if resp.status_code == 200:
                    return resp.json()
                self._raise_final(resp, sent)
                last = f"HTTP {resp.status_code}"
                retry_after = resp.headers.get("retry-after")
            if attempt < self.retry.attempts:
                self.sleep(self.retry.delay(attempt, retry_after))
        raise ProviderUnavailable(
            redact(
                f"{self.provider}: no answer from {url} after {self.retry.attempts} attempts "
                f"({last})",
                known=sent,
            )
        )

    def _admitted(
        self,
        route: Route,
        transport: Transport,
        url: str,
        body: bytes,
        headers: dict[str, str],
        tokens: int,
        used: Callable[[dict[str, Any]], int],
    ) -> dict[str, Any]:
        """``post`` through the route: admitted, sent, settled; again after a cool-down."""
        sent = _credentials(headers)
        started, last = time.monotonic(), ""
        while True:
            try:
                left = self.max_wait_s - (time.monotonic() - started)
                grant = route.acquire(
                    tokens, tenant=self.tenant, priority=self.priority, max_wait_s=left
                )
            except AdmissionTimedOut as exc:
                raise ProviderUnavailable(
                    redact(f"{self.provider}: {exc}; last answer: {last or 'none'}", known=sent)
                ) from exc
            try:
                resp = transport.post(url, body, headers, self.retry.timeout_s)
            except TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
                route.settle(grant, used=0, outcome=Outcome.FAILED)
                continue
            except BaseException:
                route.settle(grant, used=0)  # its slot back, whatever stopped it
                raise
            outcome = outcome_of(resp.status_code)
            if resp.status_code == 200:
                try:
                    body = resp.json()
                    spent = used(body) or tokens
                except Exception:
                    route.settle(grant, used=tokens)  # an answer not as promised: its slot back
                    raise
                route.settle(grant, used=spent, **_remaining(resp.headers))
                return body
            if outcome is Outcome.OK:  # a refusal retrying cannot fix
                route.settle(grant, used=0)
                self._raise_final(resp, sent)
            last = f"HTTP {resp.status_code}"
            route.settle(
                grant, used=0, outcome=outcome, retry_after_ms=_retry_after_ms(resp.headers)
            )

    def _raise_final(self, resp: Reply, sent: tuple[str, ...]) -> None:
        """Errors that retrying cannot fix."""
        detail = redact(_error_text(resp), known=sent)[:200]
        if resp.status_code in (401, 403):
            raise AuthError(f"{self.provider}: the API key was rejected ({detail})")
        if resp.status_code == 404:
            raise ModelNotFound(f"{self.provider}: unknown model or endpoint ({detail})")
        if resp.status_code == 429 or resp.status_code >= 500:
            return
        raise BadRequest(f"{self.provider}: HTTP {resp.status_code}: {detail}")


def _retry_after_ms(headers: Mapping[str, str]) -> int:
    """How long the provider asks to wait (ms; 0: it did not say)."""
    if value := headers.get("retry-after-ms"):
        with suppress(ValueError, OverflowError):  # OverflowError: "inf"
            return max(0, int(float(value)))
    if value := headers.get("retry-after"):
        with suppress(ValueError, OverflowError):
            return max(0, int(float(value) * 1000))
        with suppress(TypeError, ValueError):
            when = parsedate_to_datetime(value).timestamp()
            return max(0, int((when - time.time()) * 1000))
    return 0


def _remaining(headers: Mapping[str, str]) -> dict[str, str]:
    """What the provider says is left of its limits (OpenAI's and Anthropic's headers)."""
    requests = headers.get("x-ratelimit-remaining-requests") or headers.get(
        "anthropic-ratelimit-requests-remaining", ""
    )
    tokens = headers.get("x-ratelimit-remaining-tokens") or headers.get(
        "anthropic-ratelimit-tokens-remaining", ""
    )
    return {"remaining_requests": requests, "remaining_tokens": tokens}


def estimate_tokens(messages: Sequence[Message], max_tokens: int) -> int:
    """A call's tokens for admission, before it is sent: about 4 characters a token of
    what it carries, and all the output it may write (settled with the real count)."""
    carried = sum(len(m.content or "") + sum(len(c.arguments_json) for c in m.tool_calls)
                  for m in messages)  # fmt: skip
    return carried // 4 + max_tokens


def _credentials(headers: dict[str, str]) -> tuple[str, ...]:
    """The secrets a request's headers carry: an API key, a bearer token."""
    found = []
    for name, value in headers.items():
        if name.lower() in ("authorization", "proxy-authorization"):
            found.append(value.split(" ", 1)[-1])
        elif "key" in name.lower() or "token" in name.lower():
            found.append(value)
    return tuple(v for v in found if v)


def _error_text(resp: Reply) -> str:
    """The provider's own words for an error, whole: redacted, then cut, by the caller."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:4096] or resp.reason_phrase
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        return str(error.get("message") or error)[:4096]
    return str(error)[:4096]


class HttpProvider:
    """What the HTTP backends share: model, endpoint, key from the environment, retries."""

    name: str
    path: str  # appended to the base URL
    key_env: str  # environment variable holding the API key
    default_base_url: str

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        http: HttpJson | None = None,
        routes: Routes | None = None,
        tenant: str = "default",
        priority: int = 0,
        max_wait_s: float = MAX_WAIT_S,
    ) -> None:
        """``routes``: the fleet's, so that every call is admitted by its route's shared
        limits (``shared_state.admission``) — as ``tenant``'s, at ``priority``, waiting out
        limits and outages for up to ``max_wait_s``; None: this process's retries only."""
        self.model = model
        base = (base_url or self.default_base_url).rstrip("/")
        self.url = base + self.path
        # Local servers accept any key; hosted APIs answer 401 without one.
        self.api_key = api_key if api_key is not None else os.environ.get(self.key_env, "")
        self.route_id = route_id(self.name, model, base)
        route = routes.route(self.route_id) if routes is not None else None
        self.http = http or HttpJson(
            self.name,
            retry or RetryPolicy(),
            route=route,
            max_wait_s=max_wait_s,
            tenant=tenant,
            priority=priority,
        )
