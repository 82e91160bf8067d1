"""A job's model usage, summed over every call of every worker and subagent."""

from __future__ import annotations

import secrets

from pydantic import BaseModel, ConfigDict

from . import keys
from .scripts import Runner


class Usage(BaseModel):
    """Totals of a job's model calls (cost in USD, cached input discounted)."""

    model_config = ConfigDict(frozen=True)

    calls: int = 0
    compaction_calls: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    high_water: int = 0
    cost_usd: float = 0.0

    @property
    def cache_hit_ratio(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0

    @classmethod
    def from_hash(cls, fields: dict[str, str]) -> Usage:
        data: dict[str, float] = {k: int(v) for k, v in fields.items()}
        data["cost_usd"] = data.pop("cost_micro_usd", 0) / 1e6
        return cls.model_validate(data)


class JobUsage:
    def __init__(self, runner: Runner, job_id: str) -> None:
        self.runner = runner
        self.job_id = job_id
        self.key = keys.usage(job_id)

    def record(
        self,
        *,
        input_tokens: int,
        cached_tokens: int,
        output_tokens: int,
        cost_usd: float,
        compaction: bool = False,
        event: dict[str, str | int] | None = None,
        settles: str = "",
    ) -> bool:
        """Count one model call (once, however often the reply is lost and the call re-sent);
        False if it was counted already (or its job is gone).

        ``event`` holds the fields of the call's ``model.called`` event (task,
        worker, step, provider, model, kind), written in the same atomic step;
        so is the settlement of ``settles``, the id of the call's reservation in
        the job's budget (``TokenBudget.reserve``), charged its input and output
        tokens and its cost; ``*``: the call reserved nothing (a job without a
        budget), and they are counted in the budget all the same.
        """
        call_id = secrets.token_hex(8)
        # Whole numbers: the script adds them up as Lua numbers (exact below 2^53).
        counts = [int(n) for n in (input_tokens, cached_tokens, output_tokens)]
        args = [call_id, *counts, round(cost_usd * 1e6)]
        args += [int(compaction), settles]
        args += [x for pair in (event or {}).items() for x in pair]
        where = keys.script_keys("recordUsage", self.job_id)
        res = self.runner.run("recordUsage", self.job_id, where, args)
        return bool(res.data["counted"])

    def get(self) -> Usage:
        raw = self.runner.client.hgetall(self.key)
        return Usage.from_hash({k.decode(): v.decode() for k, v in raw.items()})
