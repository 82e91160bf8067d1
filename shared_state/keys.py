"""Every Redis key redfleet uses, in one place.

All keys of one job share the hash tag ``{<job_id>}`` so that every Lua script
touches a single slot (Redis Cluster-safe). Cross-job indexes (the job
registry, the global event stream, worker heartbeats) are separate keys and
are never touched by the same script as a job's keys.

    rf:{<job>}:job               hash   the job record
    rf:{<job>}:tasks             set    ids of the job's tasks
    rf:{<job>}:task:<task_id>    hash   one task: status, owner, token, lease
    rf:{<job>}:leases            zset   claimed task id -> lease deadline (ms)
    rf:{<job>}:queued            zset   queued task id -> queued since (ms)
    rf:{<job>}:events            stream the job's events (capped)
    rf:{<job>}:budget            hash   token budget: limit, used, reserved, r:<id> reservations
    rf:{<job>}:usage             hash   the job's model usage: calls, tokens, cost, high-water
    rf:{<job>}:usage:calls       set    ids of the model calls counted in usage (retries count once)
    rf:{<job>}:artifacts         zset   artifact id -> stored at (ms)
    rf:{<job>}:artifact:<id>     hash   one artifact: its content and metadata
    rf:{<job>}:journal           hash   idempotency key -> journaled tool call (intent, result)
    rf:{<job>}:checkpoints       hash   task id -> its last WorkingState (JSON)
    rf:{<job>}:workspace         hash   file path -> artifact id (the files the coders wrote)

    rf:jobs                      zset   job id -> submitted at (ms), all kept jobs
    rf:jobs:active               set    jobs not yet finished (what the reaper scans)
    rf:jobs:expiring             zset   finished job id -> when its keys expire (ms)
    rf:events                    stream every job's events (capped)
    rf:{workers}:index           zset   worker id -> last heartbeat (ms)
    rf:{workers}:<worker_id>     hash   one worker's heartbeat (expires)

RQ keeps its own ``rq:`` keys for the delivery queues (see ``delivery``).
"""

from __future__ import annotations

PREFIX = "rf"

JOBS = f"{PREFIX}:jobs"
ACTIVE_JOBS = f"{PREFIX}:jobs:active"
EXPIRING_JOBS = f"{PREFIX}:jobs:expiring"
EVENTS = f"{PREFIX}:events"
WORKERS = f"{PREFIX}:{{workers}}:index"  # one hash tag with each worker's hash


def _tag(job_id: str) -> str:
    return f"{PREFIX}:{{{job_id}}}"


def job(job_id: str) -> str:
    return f"{_tag(job_id)}:job"


def tasks(job_id: str) -> str:
    return f"{_tag(job_id)}:tasks"


def task(job_id: str, task_id: str) -> str:
    return f"{_tag(job_id)}:task:{task_id}"


def leases(job_id: str) -> str:
    return f"{_tag(job_id)}:leases"


def queued(job_id: str) -> str:
    return f"{_tag(job_id)}:queued"


def job_events(job_id: str) -> str:
    return f"{_tag(job_id)}:events"


def budget(job_id: str) -> str:
    return f"{_tag(job_id)}:budget"


def usage(job_id: str) -> str:
    return f"{_tag(job_id)}:usage"


def usage_calls(job_id: str) -> str:
    return f"{_tag(job_id)}:usage:calls"


def artifacts(job_id: str) -> str:
    return f"{_tag(job_id)}:artifacts"


def artifact(job_id: str, artifact_id: str) -> str:
    return f"{_tag(job_id)}:artifact:{artifact_id}"


def journal(job_id: str) -> str:
    return f"{_tag(job_id)}:journal"


def checkpoints(job_id: str) -> str:
    return f"{_tag(job_id)}:checkpoints"


def workspace(job_id: str) -> str:
    return f"{_tag(job_id)}:workspace"


def worker(worker_id: str) -> str:
    return f"{PREFIX}:{{workers}}:{worker_id}"


def job_keys(job_id: str) -> list[str]:
    """The keys of a job other than its task and artifact hashes (for retention)."""
    return [
        job(job_id),
        tasks(job_id),
        leases(job_id),
        queued(job_id),
        job_events(job_id),
        budget(job_id),
        usage(job_id),
        usage_calls(job_id),
        artifacts(job_id),
        journal(job_id),
        checkpoints(job_id),
        workspace(job_id),
    ]
