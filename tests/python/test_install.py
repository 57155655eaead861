"""`pip install ./client/python` works offline and the installed copy is self-contained.

The package directory and proto/ are copied into a temporary tree first (the
same relative layout), so the in-tree build of pip leaves nothing behind in
the checkout. The installed package must carry its generated stubs: it is
imported in a fresh interpreter with no proto/ directory reachable and no
stub cache.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON = "/usr/bin/python3"


def pip_available() -> bool:
    return subprocess.run([PYTHON, "-m", "pip", "--version"],
                          capture_output=True).returncode == 0


def test_pip_install_into_a_target_and_import(tmp_path, server):
    if not pip_available():
        print("test_install: skipped: /usr/bin/python3 has no pip (apt-get install python3-pip)",
              file=sys.__stderr__)
        pytest.skip("/usr/bin/python3 -m pip is not available (python3-pip)")
    src = tmp_path / "src"
    shutil.copytree(ROOT / "client" / "python", src / "client" / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    shutil.copytree(ROOT / "proto", src / "proto")
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_NO_INDEX"] = "1"  # offline: nothing may be downloaded
    done = subprocess.run(
        [PYTHON, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(target), "./client/python"],
        cwd=src, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    # The install leaves the source tree as it was (no build/, no egg-info),
    # so running the README's command in a checkout changes nothing there.
    leftovers = sorted(p.name for p in (src / "client" / "python").iterdir()
                       if p.name == "build" or p.name.endswith(".egg-info"))
    assert not leftovers, leftovers
    generated = target / "dendro_client" / "_pb"
    assert (generated / "dendro_pb2.py").is_file() and (generated / "dendro_pb2_grpc.py").is_file()
    # Generated at build time, never shipped in the source tree.
    assert not list((ROOT / "client" / "python").rglob("dendro_pb2*.py"))

    check = textwrap.dedent("""
        import sys
        import dendro_client
        from dendro_client import _stubs, Client
        assert dendro_client.__file__.startswith(sys.argv[1]), dendro_client.__file__
        pb, rpc = _stubs.load()
        assert pb.__file__.startswith(sys.argv[1]), pb.__file__
        print(Client(sys.argv[2]).health())
    """)
    shutil.rmtree(src)  # no proto/ to generate from: the installed stubs must be used
    run_env = dict(env, PYTHONPATH=str(target), DENDRO_STUB_CACHE=str(tmp_path / "no-cache"),
                   DENDRO_PROTO_DIR=str(tmp_path / "no-proto"))
    done = subprocess.run([PYTHON, "-c", check, str(target), server.target],
                          cwd=tmp_path, env=run_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "SERVING"
    assert not (tmp_path / "no-cache").exists()
