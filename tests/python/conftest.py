"""Fixtures: a real dendrod on a free loopback port, and the client package.

dendrod comes from ``--dendrod PATH`` or ``$DENDROD`` (ctest passes it),
else build/server/dendrod of this checkout; without one, the tests skip.
The client is imported from client/python (not installed); its gRPC stubs
are generated into a per-session cache directory on first use.
"""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "client" / "python"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--dendrod", default=None, help="path of the dendrod binary")


@pytest.fixture(scope="session")
def dendrod_path(request: pytest.FixtureRequest) -> str:
    path = (request.config.getoption("--dendrod") or os.environ.get("DENDROD") or
            str(ROOT / "build" / "server" / "dendrod"))
    if not os.access(path, os.X_OK):
        pytest.skip(f"no dendrod binary at {path} (pass --dendrod or set DENDROD)")
    return path


@pytest.fixture(scope="session", autouse=True)
def stub_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Generated stubs go to a fresh directory: each run regenerates them."""
    old = os.environ.get("DENDRO_STUB_CACHE")
    os.environ["DENDRO_STUB_CACHE"] = str(tmp_path_factory.mktemp("stubs"))
    yield
    if old is None:
        os.environ.pop("DENDRO_STUB_CACHE", None)
    else:
        os.environ["DENDRO_STUB_CACHE"] = old


class Dendrod:
    """A dendrod process on 127.0.0.1:<free port> with its own data directory."""

    def __init__(self, binary: str, data_dir: Path, args: List[str]) -> None:
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        port_file = data_dir / "port"
        self.log_path = data_dir / "dendrod.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--data_dir", str(data_dir),
             "--port_file", str(port_file), "--drain_seconds", "1", *args],
            stdout=self._log, stderr=self._log)
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"dendrod did not start; log:\n{self.log_path.read_text()}")
            time.sleep(0.05)
        self.port = int(port_file.read_text().strip())
        self.target = f"127.0.0.1:{self.port}"

    def stop(self) -> Optional[int]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server(dendrod_path: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dendrod]:
    d = Dendrod(dendrod_path, tmp_path_factory.mktemp("dendrod"), ["--workers", "2"])
    yield d
    d.stop()


@pytest.fixture(scope="session")
def client(server: Dendrod):
    from dendro_client import Client
    c = Client(server.target, timeout=30)
    yield c
    c.close()


def write_keys_file(path: Path, keys: dict) -> None:
    """keys: name -> (key, role); lines "<sha256 hex of key>  <name>  <role>"."""
    with open(path, "w") as f:
        for name, (key, role) in keys.items():
            f.write(f"{hashlib.sha256(key.encode()).hexdigest()}  {name}  {role}\n")
