#!/usr/bin/python3
"""Structured logs and request ids on the real dendrod.

With --log_format json every line dendrod writes (gRPC's own included) is
one JSON object; each RPC gets a request id in its trailing metadata (or
keeps the one the client proposed), and the log line of a failed call
carries it, with the RPC's name; lines written while a job runs carry its
id.

The dendro CLI prints the request id with any error ("[request <id>]"),
and that id finds the server's log line for the failed call.

Usage: logs_test.py DENDROD_BINARY DENDRO_CLI
"""
import json
import os
import re
import subprocess
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc_blackbox_test as bb  # noqa: E402  (generates the stubs)
from grpc_blackbox_test import grpc, pb, Server, hierarchical_logits, upload  # noqa: E402


def request_id(call_error):
    return dict(call_error.trailing_metadata() or ()).get("x-request-id")


class LogsTest(unittest.TestCase):
    def test_json_lines_with_request_and_job_ids(self):
        d = tempfile.mkdtemp(prefix="dendro_logs_")
        try:
            server = Server(d, ("--log_format", "json"))
            with self.assertRaises(grpc.RpcError) as err:
                server.models.GetModel(pb.GetModelRequest(model=pb.ModelRef(name="nope")),
                                       timeout=5)
            rid = request_id(err.exception)
            self.assertRegex(rid or "", r"^[0-9a-f]{16}$")
            with self.assertRaises(grpc.RpcError) as err:
                server.models.GetModel(pb.GetModelRequest(model=pb.ModelRef(name="nope2")),
                                       metadata=(("x-request-id", "client-chosen-42"),),
                                       timeout=5)
            self.assertEqual(request_id(err.exception), "client-chosen-42")
            _, call = server.models.ListModels.with_call(pb.ListModelsRequest(), timeout=5)
            self.assertRegex(dict(call.trailing_metadata()).get("x-request-id", ""),
                             r"^[0-9a-f]{16}$")
            cli = subprocess.run([CLI, "--server", f"127.0.0.1:{server.port}", "models", "get",
                                  "missing-model"], capture_output=True, text=True, timeout=60)
            self.assertEqual(cli.returncode, 1, cli.stderr)
            self.assertEqual(cli.stdout, "")
            self.assertEqual(len(cli.stderr.splitlines()), 1, cli.stderr)
            found = re.search(r"\[request ([0-9a-f]{16})\]", cli.stderr)
            self.assertIsNotNone(found, cli.stderr)
            cli_rid = found.group(1)
            x, _ = hierarchical_logits(500, 2, 3, seed=4)
            ds = upload(server, x)
            job = server.jobs.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
                dataset_id=ds.id, model_name="logged", l2h=pb.L2hParams())), timeout=10)
            done = server.jobs.WaitJob(pb.WaitJobRequest(id=job.id, timeout={"seconds": 60}),
                                       timeout=70)
            self.assertEqual(done.state, pb.JOB_STATE_SUCCEEDED)
            self.assertEqual(server.stop(), 0)

            with open(os.path.join(d, "dendrod.log"), errors="strict") as f:
                lines = f.read().splitlines()
            self.assertGreater(len(lines), 5)
            records = []
            for line in lines:
                rec = json.loads(line)  # every line is one object
                self.assertTrue({"time", "level", "message"} <= rec.keys(), rec)
                records.append(rec)
            failed = [r for r in records if r.get("request_id") == rid]
            self.assertTrue(failed, f"no log line carries request id {rid}")
            self.assertEqual(failed[0]["rpc"], "GetModel")
            self.assertIn("NOT_FOUND", failed[0]["message"])
            self.assertTrue(any(r.get("request_id") == "client-chosen-42" for r in records))
            from_cli = [r for r in records if r.get("request_id") == cli_rid]
            self.assertTrue(from_cli, f"no log line carries the CLI's request id {cli_rid}")
            self.assertEqual(from_cli[0]["rpc"], "GetModel")
            self.assertIn("missing-model", from_cli[0]["message"])
            self.assertTrue(any(r.get("job_id") == job.id and "succeeded" in r["message"]
                                for r in records), "no job line with its job_id")
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    bb.DENDROD = sys.argv.pop(1)
    CLI = sys.argv.pop(1)
    unittest.main(verbosity=2)
