#!/usr/bin/python3
"""What one HTTP client may hold of dendrod's listener (--http_listen).

Against a real dendrod with authentication off (loopback), checks that
  * a body is bounded before it is read: a Content-Length over
    --http_max_body_mb gets 413 at once, with no body sent; a chunked body
    gets 411; an inference whose declared shape is over --max_message_mb
    gets 429 before its data is parsed, and three such requests of 57 MiB
    at once leave the server's peak memory far below what parsing them
    took (3.4 GiB);
  * slow clients cannot starve the listener: with more sockets than
    workers trickling a header line every half second, health and a data
    endpoint still answer, and the server closes the slow sockets once
    --http_header_timeout_seconds has passed; headers over
    --http_max_header_kb get 431;
  * DNS rebinding: with authentication off a Host header that is not this
    server's gets 403 naming it (health stays open to any Host, as probes
    send the pod's address), --http_allowed_hosts adds names, and a POST
    without Content-Type: application/json gets 415.

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

THREADS = 2          # --http_threads
HEADER_TIMEOUT = 3   # --http_header_timeout_seconds


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
            "--drain_seconds", "5", "--http_threads", str(THREADS),
            "--http_header_timeout_seconds", str(HEADER_TIMEOUT),
            "--http_allowed_hosts", "dendro.internal, other.internal:81"))
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

    def test_body_over_the_limit_is_refused_before_it_is_read(self):
        # 100 MiB declared, none sent: the answer comes without the body.
        raw = raw_exchange(self.port, (
            b"POST /v2/models/m/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 104857600\r\n\r\n"))
        status, doc = status_and_json(raw)
        self.assertEqual(status, 413, raw)
        self.assertIn("104857600 bytes", doc["error"])
        self.assertIn("64 MiB limit (--http_max_body_mb)", doc["error"])

    def test_chunked_body_is_refused(self):
        raw = raw_exchange(self.port, (
            b"POST /v2/models/m/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"2\r\n{}\r\n"))
        status, doc = status_and_json(raw)
        self.assertEqual(status, 411, raw)
        self.assertIn("Content-Length", doc["error"])

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

    # -- (3) slow clients ----------------------------------------------

    def test_slow_headers_do_not_block_health(self):
        socks = []
        closed = {}
        stop = threading.Event()

        def trickle(i, s):
            try:
                s.sendall(b"GET /api/v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                n = 0
                while not stop.is_set():
                    s.sendall(b"X-Slow-%d: %d\r\n" % (n, n))
                    n += 1
                    time.sleep(0.5)
            except OSError:
                pass
            closed[i] = time.time()

        # Far more slow sockets than workers (and than cpp-httplib's own
        # pool of 8).
        start = time.time()
        threads = []
        for i in range(4 * THREADS + 12):
            s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
            socks.append(s)
            t = threading.Thread(target=trickle, args=(i, s), daemon=True)
            t.start()
            threads.append(t)
        try:
            time.sleep(1.0)
            for path in ("/v2/health/ready", "/v2/health/live", "/api/v1/models"):
                t0 = time.time()
                status, _, body = request(self.base + path, timeout=5)
                self.assertEqual(status, 200, (path, body))
                self.assertLess(time.time() - t0, 5, path)
            # The server closes every slow socket once its headers are
            # late; a send then fails.
            for t in threads:
                t.join(timeout=HEADER_TIMEOUT + 20)
            self.assertEqual(len(closed), len(socks), "slow sockets left open")
            self.assertTrue(all(c - start < HEADER_TIMEOUT + 15 for c in closed.values()))
        finally:
            stop.set()
            for s in socks:
                s.close()

    def test_headers_over_the_limit(self):
        raw = raw_exchange(self.port, b"GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                           b"X-Big: " + b"a" * (20 << 10) + b"\r\n\r\n")
        status, doc = status_and_json(raw)
        self.assertEqual(status, 431, raw[:200])
        self.assertIn("16 KiB limit (--http_max_header_kb)", doc["error"])

    def test_keep_alive_still_works(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            for _ in range(3):
                s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                data = b""
                while not data.endswith(b'{"live":true}'):
                    chunk = s.recv(4096)
                    self.assertTrue(chunk, "closed between requests")
                    data += chunk
                self.assertTrue(data.startswith(b"HTTP/1.1 200"), data)

    # -- (10) Host and Content-Type --------------------------------------

    def test_foreign_host_is_refused_with_auth_off(self):
        url = self.base + "/api/v1/models"
        status, _, body = request(url, headers={"Host": "attacker.example"})
        self.assert_error(status, body, 403, "Host 'attacker.example'", "--http_allowed_hosts")
        status, _, body = request(url, headers={"Host": f"localhost:{self.port + 1}"})
        self.assertEqual(status, 403, body)
        status, _, body = request(url, headers={"Host": "other.internal:82"})
        self.assertEqual(status, 403, body)
        for host in (f"127.0.0.1:{self.port}", f"localhost:{self.port}", f"[::1]:{self.port}",
                     "localhost", f"dendro.internal:{self.port}", "other.internal:81"):
            with self.subTest(host=host):
                status, _, body = request(url, headers={"Host": host})
                self.assertEqual(status, 200, body)
        # Probes send the pod's address: health answers any Host.
        for path in ("/v2/health/ready", "/v2/health/live"):
            status, _, body = request(self.base + path, headers={"Host": "10.1.2.3:8080"})
            self.assertEqual(status, 200, body)

    def test_post_needs_json(self):
        url = self.base + "/v2/models/m/infer"
        body = '{"inputs":[{"name":"input","shape":[1,2],"datatype":"FP32","data":[1,2]}]}'
        for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
            with self.subTest(ctype=ctype):
                headers = {"Content-Type": ctype} if ctype else {}
                status, _, out = request(url, method="POST", body=body, headers=headers)
                self.assert_error(status, out, 415, "Content-Type: application/json")
        status, _, out = request(url, method="POST", body=body,
                                 headers={"Content-Type": "application/json; charset=utf-8"})
        self.assert_error(status, out, 404, "'m'")  # past the check: no such model


if __name__ == "__main__":
    hl.set_dendrod(sys.argv.pop(1))
    unittest.main(verbosity=2)
