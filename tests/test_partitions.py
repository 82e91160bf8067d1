"""Workers cut off from Redis: a silent partition, and an outage with a restart.

A partitioned worker stops its task at lease expiry and writes nothing more,
is not taken for hung by its supervisor, and works on once the network is
back; a fleet rides out a Redis restart without restarting a worker.
"""

from __future__ import annotations

import signal
import time

from rq.job import Job as RQJob
from rq.job import JobStatus
from rq.serializers import JSONSerializer

from shared_state import JobSpec, RedisServer, Role, Scenario, State, keys

from .conftest import events_named, wait_for
from .processes import busy
from .proxy import FaultProxy

LEASE_MS = 2_000
STALL_S = 10.0
OUTAGE_S = 6.0


def _succeeded(state: State, job_id: str) -> bool:
    return state.jobs.get(job_id).status == "succeeded"


def test_a_partitioned_worker_stops_at_lease_expiry_writes_nothing_more_and_works_on_after(
    state: State, redis_server: RedisServer, up_process, start_fleet
) -> None:
    with FaultProxy(redis_server.port) as proxy:
        # The worker and its supervisor reach Redis through the proxy; the rest directly.
        cut = up_process(
            proxy.url, "--planners", "0", "--coders", "1", "--reviewers", "0", "--no-reaper",
            "--lease-ms", str(LEASE_MS),
        )  # fmt: skip
        (worker,) = wait_for(lambda: cut.registered(state, 1), 60, "the cut-off coder")
        start_fleet(planners=1, coders=0, reviewers=1, lease_ms=LEASE_MS)
        job = state.jobs.submit(JobSpec(goal="partition", scenario=Scenario.SLOW, fanout=1))
        (held,) = wait_for(lambda: busy(state, job.job_id, Role.CODER), 30, "its task claimed")
        task_id, token = held.task_id, state.tasks.get(job.job_id, held.task_id).token
        successors = start_fleet(planners=0, coders=1, reviewers=0, reaper=False, lease_ms=LEASE_MS)

        proxy.stall()
        stalled_at = time.monotonic()
        wait_for(
            lambda: state.tasks.get(job.job_id, task_id).owner not in ("", worker.worker_id),
            20,
            "a worker on the direct URL to take the task over",
        )
        time.sleep(max(0.0, stalled_at + STALL_S - time.monotonic()))  # the partition's length
        proxy.resume()
        resumed_at = time.monotonic()

        lost = cut.logged("lease.lost", worker=worker.worker_id, task_id=task_id)
        assert len(lost) == 1
        # Logged at lease expiry, while the network was still silent, not when it came back.
        assert stalled_at < lost[0][0] < resumed_at
        assert cut.logged("task.abandoned", task_id=task_id)
        wait_for(lambda: _succeeded(state, job.job_id), 60, "the job to succeed")
        ended = [
            e for e in events_named(state, job.job_id, "task.succeeded") if e.task_id == task_id
        ]
        assert len(ended) == 1 and ended[0].worker != worker.worker_id
        # Nothing written after the lease was lost: the only stale writes that reached
        # Redis are renewals that were on the wire when the partition began or before
        # the local deadline (at most one per heartbeat tick of the lease), all refused.
        stale = events_named(state, job.job_id, "task.fenced")
        fenced = [e for e in stale if e.worker == worker.worker_id]
        assert all(e.model_extra["op"] == "renew" and e.token == token for e in fenced)
        assert len(fenced) <= 3

        # Back on the network, the same process takes tasks again.
        successors.stop()
        after = state.jobs.submit(JobSpec(goal="after", scenario=Scenario.NOOP, fanout=1))
        wait_for(lambda: _succeeded(state, after.job_id), 60, "a job after the partition")
        claimed = {e.worker for e in events_named(state, after.job_id, "task.claimed")}
        assert worker.worker_id in claimed  # the only coder there is
        assert cut.worker_pids() == {worker.pid}
        assert not cut.logged("fleet.worker_hung") and not cut.logged("fleet.worker_died")
        assert cut.stop() == 0


def test_a_fleet_rides_out_a_redis_restart_without_restarting_a_worker(
    tmp_path, up_process
) -> None:
    data = tmp_path / "redis"
    server = RedisServer(data_dir=data).start()
    try:
        state = State.connect(server.url)
        up = up_process(server.url, "--coders", "1", "--lease-ms", "1500", "--json")
        listed = wait_for(lambda: up.registered(state, 3), 60, "the fleet's three workers")
        job = state.jobs.submit(JobSpec(goal="outage", scenario=Scenario.SLOW, fanout=1))
        wait_for(lambda: busy(state, job.job_id, Role.PLANNER), 30, "the planner busy")
        envelope = state.client.hget(keys.task(job.job_id, job.root_task), "envelope").decode()

        server.process.send_signal(signal.SIGKILL)
        server.process.wait()
        time.sleep(OUTAGE_S)  # the outage's length
        server = RedisServer(port=server.port, data_dir=data).start()

        # The planner's run lost its lease while Redis was away and ended there; RQ's
        # writes as its envelope ended wait for the slot's next dequeue, which RQ's loop
        # tries again until Redis is back: they are written then (RQ keeps a finished
        # envelope 10 s), and no slot's loop had to end for it.
        def finished() -> bool:
            rq = RQJob.fetch(envelope, connection=state.client, serializer=JSONSerializer)
            return rq.get_status() == JobStatus.FINISHED

        wait_for(finished, 30, "RQ's record of the envelope the outage ended")
        wait_for(lambda: _succeeded(state, job.job_id), 90, "the job to succeed after the outage")
        assert up.worker_pids() == {w.pid for w in listed}
        assert up.stop() == 0
        # Every line the fleet wrote while Redis was away is JSON, RQ's own included.
        assert up.plain == []
        report = up.report()
        assert (report["restarts"], report["hung"]) == (0, 0)
        state.close()
    finally:
        server.stop()
