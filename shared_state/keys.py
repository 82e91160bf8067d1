"""Every Redis key redfleet uses, in one place.

All keys of one job share the hash tag ``{<job_id>}`` so that every Lua script
touches a single slot (Redis Cluster-safe). Cross-job indexes (the job
registry, the global event stream, worker heartbeats) are separate keys and
are never touched by the same script as a job's keys.

    rf:{<job>}:job               hash   the job record
    rf:{<job>}:tasks             set    ids of the job's tasks
    rf:{<job>}:task:<task_id>    hash   one task: status, owner, token, lease
    rf:{<job>}:leases            zset   claimed task id -> lease deadline (ms)
    rf:{<job>}:queued            zset   queued task id -> queued since (ms), or due at (a
                                        retry waiting out its backoff)
    rf:{<job>}:retries           zset   task id -> due (ms): retries the reaper delivers then
    rf:{<job>}:events            stream the job's events (capped)
    rf:{<job>}:budget            hash   token budget: limit, used, reserved, r:<id> reservations,
                                        sweep_at (the earliest expiry held, or earlier)
    rf:{<job>}:usage             hash   the job's model usage: calls, tokens, cost, high-water
    rf:{<job>}:usage:calls       set    ids of the model calls counted in usage (retries count once)
    rf:{<job>}:artifacts         zset   artifact id -> last stored at (ms)
    rf:{<job>}:artifact:<id>     hash   one artifact: its content and metadata
    rf:{<job>}:journal           hash   idempotency key -> journaled tool call (intent, result)
    rf:{<job>}:journal:names     zset   every idempotency key of the journal, all scored 0: a
                                        task's are one range by their prefix (ZRANGEBYLEX)
    rf:{<job>}:checkpoints       hash   task id -> its last WorkingState (JSON)
    rf:{<job>}:workspace         hash   file path -> artifact id of what the coders wrote, or ""
                                        for a file they deleted (the changes to the base)
    rf:{<job>}:progress          hash   a job over many items: its item list's id and counts
                                        (total, pending, done, validated, failed), the planner's

    rf:jobs                      zset   job id -> submitted at (ms), all kept jobs
    rf:jobs:active               set    jobs not yet finished (what the reaper scans)
    rf:jobs:expiring             zset   finished job id -> when its keys expire (ms)
    rf:events                    stream every job's events (capped)
    rf:metrics                   hash   fleet-wide counters of the mirrored events (`/metrics`)
    rf:submit:<digest>           string a tenant's idempotency key -> its job id (expires)
    rf:swap:<rq id>:<rq id>      string a fair-share swap of two envelopes, done (a minute)
    rf:{workers}:index           zset   worker id -> last heartbeat (ms)
    rf:{workers}:<worker_id>     hash   one worker's heartbeat (expires)

Model routes (``admission``): one provider's model at one endpoint, shared by the
fleet, each under a hash tag of its own:

    rf:routes                    set    route ids seen (limits show lists them)
    rf:spend:{<tenant>}          hash   a tenant's daily money budget: limit_usd, used_usd and
                                        reserved_usd today (micro-dollars), day, r:<id>
    rf:route:{<route>}           hash   limits (rpm, tpm, concurrency), token buckets,
                                        cool-down, counters, what the provider said is left
    rf:route:{<route>}:inflight  zset   admitted call id -> when its slot is given back (ms)
    rf:route:{<route>}:waiting   zset   waiting call id -> first asked (ms): the queue
    rf:route:{<route>}:asked     zset   waiting call id -> last asked (ms)
    rf:route:{<route>}:vclock    hash   fair queueing's virtual clocks; when each waiter asked
    rf:route:{<route>}:settled   zset   settle id -> ms: settles of calls never admitted (an
                                        unlimited route's), kept 10 min against a re-send
    rf:admission:tenants         hash   weight:<tenant>, cap:<tenant> (calls at once a route)

Long-term memory (``memory``) keeps each tenant's items under one hash tag of
their own, so the tenant is in every key and one script sees one tenant only:

    rf:mem:{<tenant>}:item:<id>            hash   one item: text, scope, provenance, lifecycle
    rf:mem:{<tenant>}:items                zset   live item id -> observed at (ms)
    rf:mem:{<tenant>}:scope:<scope>        set    ids of one scope's items
    rf:mem:{<tenant>}:user:<user>          set    ids of one user's items (any scope)
    rf:mem:{<tenant>}:chain:<scope>|<key>  list   the versions of one claim, oldest first
    rf:mem:{<tenant>}:derived:<id>         set    ids of the items derived from <id>
    rf:mem:{<tenant>}:jobitems:<job>       set    ids of a job's job: and temp: items
    rf:mem:{<tenant>}:jobfiles:<job>       set    <scope>|<path> of a job's job: and temp: files
    rf:mem:{<tenant>}:seen:<digest>        set    jobs that wrote one claim (for promotion)
    rf:mem:{<tenant>}:forgotten            set    shingle digests and ids of forgotten items
    rf:mem:{<tenant>}:changes              stream puts and forgets, for recall caches (capped)
    rf:mem:{<tenant>}:index                hash   the recall index's snapshot: blob, upto, ...
    rf:mem:{<tenant>}:forgets              string forgets so far (older snapshots are stale)
    rf:mem:{<tenant>}:file:<scope>|<path>  hash   one memory file: content, sha256, version
    rf:mem:{<tenant>}:filev:<scope>|<path> list   its earlier versions, newest first
    rf:mem:{<tenant>}:files:<scope>        zset   path -> updated at (ms), one scope's files
    rf:mem:tenants                         set    tenants that have memory

Workspaces (``workspace``): the files a job is submitted with, stored once per
tenant by content, under a hash tag of the tenant's own (no script touches them):

    rf:ws:{<tenant>}:blob:<sha256>         string one file's bytes (expires unless imported again)
    rf:ws:{<tenant>}:tree:<tree id>        hash   a snapshot: path -> "sha256 size mode t|b"

The memory scripts get the tenant's prefix (``memory_prefix``) as KEYS[1] and
name the rest from it with the suffixes above: an item's chain and derived
sets are known only once its hash is read.

RQ keeps its own ``rq:`` keys for the delivery queues (see ``delivery``).
"""

from __future__ import annotations

import hashlib

PREFIX = "rf"

JOBS = f"{PREFIX}:jobs"
ACTIVE_JOBS = f"{PREFIX}:jobs:active"
EXPIRING_JOBS = f"{PREFIX}:jobs:expiring"
EVENTS = f"{PREFIX}:events"
METRICS = f"{PREFIX}:metrics"
WORKERS = f"{PREFIX}:{{workers}}:index"  # one hash tag with each worker's hash
ROUTES = f"{PREFIX}:routes"
ADMISSION_TENANTS = f"{PREFIX}:admission:tenants"  # weight:<tenant>, cap:<tenant>


def blob(tenant: str, sha256: str) -> str:
    return f"{PREFIX}:ws:{{{tenant}}}:blob:{sha256}"


def tree(tenant: str, tree_id: str) -> str:
    return f"{PREFIX}:ws:{{{tenant}}}:tree:{tree_id}"


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


def retries(job_id: str) -> str:
    return f"{_tag(job_id)}:retries"


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


def journal_names(job_id: str) -> str:
    return f"{journal(job_id)}:names"  # the scripts name it so (``journalWrite``)


def checkpoints(job_id: str) -> str:
    return f"{_tag(job_id)}:checkpoints"


def workspace(job_id: str) -> str:
    return f"{_tag(job_id)}:workspace"


def progress(job_id: str) -> str:
    return f"{_tag(job_id)}:progress"


MEMORY_TENANTS = f"{PREFIX}:mem:tenants"


def route(route_id: str) -> str:
    return f"{PREFIX}:route:{{{route_id}}}"


def route_inflight(route_id: str) -> str:
    return f"{route(route_id)}:inflight"


def route_waiting(route_id: str) -> str:
    return f"{route(route_id)}:waiting"


def route_asked(route_id: str) -> str:
    return f"{route(route_id)}:asked"


def route_vclock(route_id: str) -> str:
    return f"{route(route_id)}:vclock"


def route_settled(route_id: str) -> str:
    return f"{route(route_id)}:settled"


def tenant_spend(tenant: str) -> str:
    return f"{PREFIX}:spend:{{{tenant}}}"


def memory_prefix(tenant: str) -> str:
    return f"{PREFIX}:mem:{{{tenant}}}:"


def memory_item(tenant: str, item_id: str) -> str:
    return f"{memory_prefix(tenant)}item:{item_id}"


def memory_items(tenant: str) -> str:
    return f"{memory_prefix(tenant)}items"


def memory_scope(tenant: str, scope: str) -> str:
    return f"{memory_prefix(tenant)}scope:{scope}"


def memory_user(tenant: str, user: str) -> str:
    return f"{memory_prefix(tenant)}user:{user}"


def memory_chain(tenant: str, scope: str, key: str) -> str:
    return f"{memory_prefix(tenant)}chain:{scope}|{key}"


def memory_derived(tenant: str, item_id: str) -> str:
    return f"{memory_prefix(tenant)}derived:{item_id}"


def memory_job_items(tenant: str, job_id: str) -> str:
    return f"{memory_prefix(tenant)}jobitems:{job_id}"


def memory_job_files(tenant: str, job_id: str) -> str:
    return f"{memory_prefix(tenant)}jobfiles:{job_id}"


def memory_query_vector(tenant: str, embedder: str, query: str) -> str:
    """A query's vector by ``embedder``, kept a while for the other workers asking it."""
    digest = hashlib.sha256(query.encode()).hexdigest()[:32]
    return f"{memory_prefix(tenant)}qvec:{embedder}:{digest}"


def memory_seen(tenant: str, claim_digest: str) -> str:
    return f"{memory_prefix(tenant)}seen:{claim_digest}"


def memory_forgotten(tenant: str) -> str:
    return f"{memory_prefix(tenant)}forgotten"


def memory_changes(tenant: str) -> str:
    return f"{memory_prefix(tenant)}changes"


def memory_index(tenant: str) -> str:
    return f"{memory_prefix(tenant)}index"


def memory_forgets(tenant: str) -> str:
    return f"{memory_prefix(tenant)}forgets"


def memory_file(tenant: str, scope: str, path: str) -> str:
    return f"{memory_prefix(tenant)}file:{scope}|{path}"


def memory_file_versions(tenant: str, scope: str, path: str) -> str:
    return f"{memory_prefix(tenant)}filev:{scope}|{path}"


def memory_files(tenant: str, scope: str) -> str:
    return f"{memory_prefix(tenant)}files:{scope}"


def submit_key(tenant: str, idempotency_key: str) -> str:
    """Hashed: the client's string may have any shape; one tenant's never meets another's."""
    digest = hashlib.sha256(f"{tenant}\0{idempotency_key}".encode()).hexdigest()[:32]
    return f"{PREFIX}:submit:{digest}"


def envelope_swap(taken: str, instead: str) -> str:
    """A fair-share swap of two envelopes (RQ job ids), kept a minute: a re-sent swap's
    answer."""
    return f"{PREFIX}:swap:{taken}:{instead}"


def worker(worker_id: str) -> str:
    return f"{PREFIX}:{{workers}}:{worker_id}"


def job_keys(job_id: str) -> list[str]:
    """The keys of a job other than its task and artifact hashes (for retention)."""
    return [
        job(job_id),
        tasks(job_id),
        leases(job_id),
        queued(job_id),
        retries(job_id),
        job_events(job_id),
        budget(job_id),
        usage(job_id),
        usage_calls(job_id),
        artifacts(job_id),
        journal(job_id),
        journal_names(job_id),
        checkpoints(job_id),
        workspace(job_id),
        progress(job_id),
    ]


_OF_ROUTE = ("route", "route_inflight", "route_waiting", "route_asked", "route_vclock",
             "route_settled")  # fmt: skip

# Each script's fixed KEYS, in order, named by what builds them: a function of this module
# (``task`` the caller's task, ``parent`` and ``root`` another task of its job) or a
# constant (upper case). Callers take their keys from ``script_keys``, never by position
# from a shared list; tests/test_state_storage.py pins every list against the KEYS lines
# of the script's own header, so a change on either side that the other lacks fails there.
_TASK = ("task", "job", "job_events", "leases", "queued", "tasks")
_JOB = ("job", "job_events", "leases", "queued", "tasks")
SCRIPT_KEYS: dict[str, tuple[str, ...]] = {
    "beatWorker": ("worker", "WORKERS"),
    "blockTask": _TASK,
    "admitCall": ("route", "route_inflight", "route_waiting", "route_asked", "route_vclock"),
    "cancelJob": _JOB,
    "claimTask": (*_TASK, "retries", "checkpoints", "journal"),
    "completeTask": (*_TASK, "parent"),
    "decideTask": _TASK,
    "endTasks": _JOB[:4],
    "failTask": (*_TASK, "retries"),
    "memoryFile": ("memory_prefix",),
    "memoryForget": ("memory_prefix",),
    "memoryIndex": ("memory_prefix",),
    "memoryVector": ("memory_prefix",),
    "memoryWrite": ("memory_prefix",),
    "mirrorEvents": ("EVENTS", "METRICS"),
    "ownerWrite": _TASK[:5],
    "reapTask": (*_TASK, "retries"),
    "readJournal": ("journal", "journal_names"),
    "recordUsage": ("usage", "usage_calls", "job", "job_events", "budget"),
    "redactArtifact": ("artifact", "artifacts"),  # then the redacted copy's hash
    "redactRecord": (),  # its keys are the record to redact (and a scratch key beside it)
    "redeliverTask": ("task", "job", "job_events", "queued", "retries"),
    "renewLease": _TASK[:4],
    "reserveTokens": ("budget",),
    "resumeJob": _JOB,
    "retryJob": _JOB,
    "settleCall": ("route", "route_inflight", "route_settled"),
    "settleTokens": ("budget",),
    "spawnChildren": (*_TASK, "journal"),
    "storeArtifact": ("artifact", "artifacts", "job"),
    "submitJob": ("job", "root", "budget", "tasks", "queued", "job_events"),
    "swapEnvelope": (),  # RQ's queue, its intermediate list and mark there; the swap's record
}


def script_keys(
    script: str,
    job_id: str = "",
    task_id: str = "",
    *,
    parent_id: str = "",
    root_id: str = "",
    artifact_id: str = "",
    worker_id: str = "",
    tenant: str = "",
    route_id: str = "",
) -> list[str]:
    """The fixed KEYS of ``script``, in its order (``SCRIPT_KEYS``), for these ids.

    A script's variable keys (a job's task hashes, an owner's write targets)
    follow them, as its header says.
    """
    # Called for every script a worker runs (several a model call): no function is made
    # per call.
    found = []
    for name in SCRIPT_KEYS[script]:
        if name in ("task", "parent", "root"):
            found.append(
                task(job_id, {"task": task_id, "parent": parent_id, "root": root_id}[name])
            )
        elif name == "artifact":
            found.append(artifact(job_id, artifact_id))
        elif name == "worker":
            found.append(worker(worker_id))
        elif name == "memory_prefix":
            found.append(memory_prefix(tenant))
        elif name in _OF_ROUTE:
            found.append(globals()[name](route_id))
        else:  # a key of the job (a function of its id), or a constant (upper case)
            key = globals()[name]
            found.append(key if isinstance(key, str) else key(job_id))
    return found
