#!/usr/bin/python3
"""What one HTTP client may hold of dendrod's listener (--http_listen).

Against a real dendrod with authentication off (loopback), checks that
  * an inference whose declared shape is over --max_message_mb gets 429
    before its data is parsed, and three such requests of 57 MiB at once
    leave the server's peak memory far below what parsing them took
    (3.4 GiB).

Usage: http_limits_test.py DENDROD_BINARY
"""
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_lib as hl  # noqa: E402
from grpc_blackbox_test import Server  # noqa: E402
from http_lib import request  # noqa: E402



def raw_exchange(port, data, timeout=20):
    """Sends `data` on a new connection and returns what the server
    answers until it closes (or `timeout` passes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out:
                head, _, body = out.partition(b"\r\n\r\n")
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        if len(body) >= int(line.split(b":")[1]):
                            return out
        return out


def status_and_json(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


def peak_rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class LimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="dendro_http_limits_")
        cls.port = hl.free_port()
        cls.server = Server(cls.dir, (
            "--http_listen", f"127.0.0.1:{cls.port}", "--threads", "1",
            "--drain_seconds", "5"))
        cls.base = f"http://127.0.0.1:{cls.port}"

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop() if cls.server.proc.poll() is None else cls.server.proc.returncode
        if code != 0:
            with open(os.path.join(cls.dir, "dendrod.log"), errors="replace") as f:
                sys.stderr.write(f.read()[-5000:])
        shutil.rmtree(cls.dir, ignore_errors=True)
        if code != 0:
            raise AssertionError(f"dendrod exited with {code}")

    def assert_error(self, status, body, expected, *fragments):
        self.assertEqual(status, expected, body)
        doc = json.loads(body)
        for f in fragments:
            self.assertIn(f, doc["error"])
        return doc

    # -- (2) bodies and shapes ------------------------------------------

    def infer_body(self, rows, cols, numbers):
        return ('{"inputs":[{"name":"input","shape":[%d,%d],"datatype":"FP32","data":['
                % (rows, cols) + "0," * (numbers - 1) + "0]}]}").encode()

    def test_shape_over_the_limit_is_refused_before_the_data(self):
        body = self.infer_body(3000000, 10, 3000000)
        status, _, out = request(self.base + "/v2/models/m/infer", method="POST", body=body,
                                 headers={"Content-Type": "application/json"})
        self.assert_error(status, out, 429, "[3000000, 10]", "64 MiB", "--max_message_mb",
                          "send at most 1677721 rows")
        # The same limit when the data comes before the shape.
        body = ('{"inputs":[{"name":"input","datatype":"FP32","data":[' + "0," * 1677721 * 10 +
                '0],"shape":[1677722,10]}]}')
        status, _, out = request(self.base + "/v2/models/m/infer", method="POST", body=body,
                                 headers={"Content-Type": "application/json"})
        self.assert_error(status, out, 429, "--max_message_mb")

    def test_three_large_requests_at_once_stay_small(self):
        pid = self.server.proc.pid
        try:  # resets the peak to the current size
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        before = rss_bytes(pid)
        body = self.infer_body(3000000, 10, 30000000)  # 57 MiB, as in the report
        self.assertGreater(len(body), 57 << 20)
        results = []

        def send():
            results.append(request(self.base + "/v2/models/m/infer", method="POST", body=body,
                                   headers={"Content-Type": "application/json"}))
        threads = [threading.Thread(target=send) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        self.assertEqual(len(results), 3)
        for status, _, out in results:
            self.assert_error(status, out, 429, "--max_message_mb")
        grown = peak_rss_bytes(pid) - before
        print(f"peak RSS grew by {grown >> 20} MiB", file=sys.stderr)
        # Three bodies held at once are about 180 MB (more under the
        # sanitizers); the tree of their numbers took 3.4 GiB.
        self.assertLess(grown, 1 << 30, f"peak RSS grew by {grown >> 20} MiB")



if __name__ == "__main__":
    hl.set_dendrod(sys.argv.pop(1))
    unittest.main(verbosity=2)
