#!/usr/bin/python3
"""Job throughput of 1, 2 and 3 dendrod replicas over one PostgreSQL catalogue.

For each replica count: a fresh database and data directory, that many
replicas (one worker each, --threads 1), and JOBS small L2H fits (a 300 x 6
logits dataset) submitted round-robin as fast as the queue takes them.
Reports jobs/s from the first submit to the last job's end, and the claim
latency (a job's start_time minus its create_time) median and p95. Then the
takeover time: kill -9 of the replica running a long job, until another
replica has started it again (lease --job_lease_seconds).

Usage: replicas_bench.py DENDROD [JOBS=60] [LEASE_SECONDS=3]
"""
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "blackbox"))
import grpc_blackbox_test as bb  # noqa: E402
from grpc_blackbox_test import grpc, pb, hierarchical_logits  # noqa: E402
from pg_lib import Postgres  # noqa: E402
import replicas_test as rt  # noqa: E402


def seconds(ts):
    return ts.seconds + ts.nanos * 1e-9


def run(pg, replicas, jobs, lease):
    work = tempfile.mkdtemp(prefix="dendro_rbench_")
    data = os.path.join(work, "data")
    os.makedirs(data)
    catalog = pg.create_database(f"bench{replicas}_{int(time.time())}")
    rt.LEASE_SECONDS = lease
    rt.QUEUE_SIZE = jobs
    rs = [rt.Replica(f"b{i}", catalog, data, work) for i in range(replicas)]
    try:
        x = hierarchical_logits(300, 2, 3, seed=3)[0]
        ds = rt.upload(rs[0], x)
        t0 = time.time()
        ids = []
        for i in range(jobs):
            spec = pb.JobSpec(dataset_id=ds, model_name=f"m{i}", l2h=pb.L2hParams())
            ids.append(rs[i % replicas].jobs.SubmitJob(pb.SubmitJobRequest(spec=spec),
                                                       timeout=30).id)
        done = [rt.wait(rs[0], j) for j in ids]
        assert all(d.state == pb.JOB_STATE_SUCCEEDED for d in done)
        wall = max(seconds(d.end_time) for d in done) - t0
        claim = sorted(seconds(d.start_time) - seconds(d.create_time) for d in done)
        return {"replicas": replicas, "jobs": jobs, "seconds": wall, "jobs_per_s": jobs / wall,
                "claim_median_ms": 1000 * statistics.median(claim),
                "claim_p95_ms": 1000 * claim[int(0.95 * (len(claim) - 1))]}
    finally:
        for r in rs:
            r.stop()
        shutil.rmtree(work, ignore_errors=True)


def takeover(pg, lease):
    work = tempfile.mkdtemp(prefix="dendro_rbench_")
    data = os.path.join(work, "data")
    os.makedirs(data)
    catalog = pg.create_database(f"takeover_{int(time.time())}")
    rt.LEASE_SECONDS = lease
    rs = [rt.Replica(f"t{i}", catalog, data, work) for i in range(2)]
    try:
        ds = rt.upload(rs[0], rt.blobs(600, 8, 1))
        job = rs[0].jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
            dataset_id=ds, model_name="long", ghhc=rt.long_ghhc())), timeout=30)
        runner = rt.wait_running(rs, job.id)
        other = next(r for r in rs if r is not runner)
        time.sleep(0.5)
        killed = time.time()
        runner.proc.send_signal(signal.SIGKILL)
        runner.proc.wait()
        while True:
            j = other.jobs.GetJob(pb.GetJobRequest(id=job.id), timeout=10)
            if j.state == pb.JOB_STATE_RUNNING and j.attempts == 2:
                break
            time.sleep(0.02)
        taken = time.time() - killed
        other.jobs.CancelJob(pb.CancelJobRequest(id=job.id), timeout=10)
        rt.wait(other, job.id)
        return taken
    finally:
        for r in rs:
            r.stop()
        shutil.rmtree(work, ignore_errors=True)


def main():
    bb.DENDROD = sys.argv[1]
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    lease = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    pg = Postgres(durable=True)
    why = pg.why_missing()
    if why:
        sys.exit(why)
    pg.start()
    try:
        print(f"load average before: {os.getloadavg()}")
        print("replicas  jobs  seconds  jobs/s  claim median ms  claim p95 ms")
        for n in (1, 2, 3):
            r = run(pg, n, jobs, lease)
            print(f"{r['replicas']:8d}  {r['jobs']:4d}  {r['seconds']:7.2f}  {r['jobs_per_s']:6.1f}"
                  f"  {r['claim_median_ms']:15.1f}  {r['claim_p95_ms']:12.1f}", flush=True)
        t = takeover(pg, lease)
        print(f"kill -9 to restart on another replica (lease {lease} s): {t:.2f} s")
        print(f"load average after: {os.getloadavg()}")
    finally:
        pg.stop()


if __name__ == "__main__":
    main()
