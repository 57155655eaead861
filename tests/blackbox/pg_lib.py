"""A throwaway PostgreSQL 15 cluster for black-box tests.

Mirrors tests/server/postgres_harness.h: initdb into a temporary directory
(as the `postgres` user when running as root, since PostgreSQL refuses
root), trust authentication for the user `dendro`, loopback on a free port.
`Postgres.start()` returns None with a reason when the binaries are absent
(deploy/packages.txt installs them, so CI never takes that path).
"""
import os
import pwd
import shutil
import socket
import subprocess
import tempfile

BIN = "/usr/lib/postgresql/15/bin"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    def __init__(self, durable=False):
        self.durable = durable
        self.dir = None
        self.port = None
        self.user = None

    def why_missing(self):
        for b in ("initdb", "pg_ctl", "postgres", "psql"):
            if not os.path.exists(os.path.join(BIN, b)):
                return f"{BIN}/{b} is missing (install postgresql-15; deploy/packages.txt lists it)"
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                return "running as root and there is no 'postgres' user to run the server as"
        return None

    def _run(self, *args):
        cmd = list(args)
        if self.user:
            cmd = ["runuser", "-u", self.user, "--"] + cmd
        with open(os.path.join(self.dir, "harness.log"), "ab") as log:
            subprocess.run(cmd, check=True, stdout=log, stderr=log)

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="dendro_pg_")
        if os.geteuid() == 0:
            self.user = "postgres"
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self._run(f"{BIN}/initdb", "-D", f"{self.dir}/data", "-U", "dendro", "--auth=trust",
                  "-E", "UTF8", "--no-sync")
        log = os.path.join(self.dir, "postgres.log")
        # PostgreSQL cannot bind port 0, so the port is picked before it binds;
        # a test running beside this one may take it in between. Then the
        # postmaster exits saying so, and the start is tried on another port.
        for attempt in range(5):
            self.port = free_port()
            opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                    "-c max_connections=200" + ("" if self.durable else " -c fsync=off"))
            try:
                self._run(f"{BIN}/pg_ctl", "-D", f"{self.dir}/data", "-l", log,
                          "-w", "-t", "60", "-o", opts, "start")
                return self
            except subprocess.CalledProcessError:
                with open(log, "rb") as f:
                    taken = b"could not bind" in f.read()
                if not taken or attempt == 4:
                    raise
        return self

    def create_database(self, name):
        self._run(f"{BIN}/psql", "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", "dendro",
                  "-d", "postgres", "-c", f"CREATE DATABASE {name}")
        return f"postgresql://dendro@127.0.0.1:{self.port}/{name}"

    def stop(self):
        if self.dir is None:
            return
        try:
            self._run(f"{BIN}/pg_ctl", "-D", f"{self.dir}/data", "-m", "immediate", "-w", "stop")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
