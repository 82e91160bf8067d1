"""How long to wait after a failure: the fleet's one backoff policy, by kind of failure.

Two things back off, and both are decided here:

- a **route** cools for the whole fleet after a provider's 429 or overload
  (``LIMITED``) or after no answer (``FAILED``): the base, doubled with each
  failure in a row up to the cap, or the provider's Retry-After
  (``settleCall``);
- a **failed attempt** is tried again only after a delay, by what failed it
  (``Failure``): the base, doubled with each attempt up to the cap, with
  equal jitter — half of it fixed, half random — so that tasks failed
  together do not come back together. The task waits queued with a
  not-before time on Redis time (``failTask``, ``reapTask``, ``claimTask``
  take ``retry_args``); no envelope is sent until then, a claim before then
  is refused, and the reaper delivers it once it is due.

A route's cool-down never costs a task an attempt; an attempt fails only
when a call could not be made at all, and then waits the longest.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class Backoff:
    base_ms: int
    cap_ms: int


class Failure(StrEnum):
    """What ended an attempt that will be tried again."""

    ERROR = "error"  # the run raised: a bug or a fault no role expected
    PROVIDER = "provider"  # the model provider could not be reached, past its own waits
    LOST = "lost"  # the worker was lost: its lease ran out


# A route's cool-down after a provider's answer, before doubling or Retry-After.
COOLING = {
    "limited": Backoff(base_ms=1_000, cap_ms=60_000),
    "failed": Backoff(base_ms=1_000, cap_ms=30_000),
}

# The delay before a failed attempt's retry. A provider outage has already been
# waited out call by call (up to ``admission.MAX_WAIT_S``), so what is left waits
# long. A lost worker is seldom the task's fault, and its task has already waited
# out the lease: it is taken over at once (by the reaper, or by a claim).
RETRY = {
    Failure.ERROR: Backoff(base_ms=2_000, cap_ms=5 * 60_000),
    Failure.PROVIDER: Backoff(base_ms=30_000, cap_ms=15 * 60_000),
    Failure.LOST: Backoff(base_ms=0, cap_ms=0),
}


def retry_args(kind: Failure) -> list[int | float]:
    """The scripts' arguments for a retry after ``kind``: base, cap (ms) and the jitter."""
    policy = RETRY[kind]
    return [policy.base_ms, policy.cap_ms, random.random()]
