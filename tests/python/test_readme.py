"""The README's examples run as written against a real dendrod: the "From Python"
example, and every shell block that talks to a server (see NOT_RUN for the rest)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest


ROOT = Path(__file__).resolve().parents[2]


def readme_example() -> str:
    """The first ```python block of the README's "From Python" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## From Python\n", 1)
    assert len(section) == 2, 'README.md has no "## From Python" section'
    body = section[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", body, re.S)
    assert block, 'the "From Python" section has no ```python block'
    return block.group(1)


def test_readme_python_example(server, monkeypatch, capsys):
    code = readme_example()
    assert "dendrogram(" in code and ".linkage" in code
    try:
        import matplotlib
        matplotlib.use("Agg")
    except ImportError:
        # Only the drawing line needs matplotlib: everything else still runs.
        lines = []
        for line in code.splitlines():
            if re.match(r"\s*dendrogram\(", line):
                print("README example: matplotlib is not installed; not running: " +
                      line.strip(), file=sys.__stderr__)
                line = "pass"
            lines.append(line)
        code = "\n".join(lines) + "\n"
    monkeypatch.setenv("DENDRO_SERVER", server.target)
    monkeypatch.delenv("DENDRO_API_KEY", raising=False)
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(code, "README.md (From Python)", "exec"), namespace)
    model, tree = namespace["model"], namespace["tree"]
    assert (model.name, model.method, tree.num_leaves) == ("example", "l2h", 20)
    assert tree.linkage.shape == (19, 4)
    assert capsys.readouterr().out.strip().endswith(";")


# --- The README's shell examples -----------------------------------------------------
#
# Every ```sh or ```bash block of README.md is either run here against a real
# dendrod or listed in NOT_RUN with the reason; a new block that is neither
# fails test_every_shell_block_is_run_or_listed. Blocks are known by their
# first command line (comment lines skipped; trailing comments are cut from
# every command).
#
# How a block runs: in a fresh directory holding the input files its commands
# name (made up here, with shapes that fit together), each command on its own
# `bash -c` with `set -eo pipefail`, `dendro` and `dendrod` first on PATH.
# Commands that only set shell state (`umask`, `source`) are repeated before
# every later command of the block. A `dendrod ...` command is started in the
# background, waited for until its port accepts connections, and stopped when
# the block ends. The only edits to a command are the explicit placeholders
# of each block's SUBSTITUTIONS.

NOT_RUN = {
    "sudo bash deploy/quickstart.sh":
        "installs Debian packages with apt-get and builds; tests/run.sh does the same steps",
    "sudo bash tests/run.sh": "runs the whole suite, this test included",
    "/usr/bin/python3 -m pip install --no-deps --no-build-isolation ./client/python":
        "installs into the system's Python; test_install.py runs the same pip command "
        "into a temporary directory",
    "kubectl apply -k deploy/k8s/single":
        "needs a Kubernetes cluster (kubectl); deploy_yaml_lint and deploy_k8s_variants "
        "check the manifests",
    "docker build -t dendro .":
        "needs a Docker daemon; deploy/test-image.sh builds and checks the image with buildah",
}
CLI_BLOCK = "dendro l2h logits.npy --labels y.npy --name cifar100 --out tree.json --out tree.nwk"
SECURITY_BLOCK = "umask 077"
STATE_COMMANDS = ("umask ", "source ")


def shell_blocks() -> list:
    """[(first command line, [commands])] for every ```sh/```bash block."""
    text = (ROOT / "README.md").read_text()
    blocks = []
    for body in re.findall(r"^```(?:sh|bash)\n(.*?)^```", text, re.S | re.M):
        commands, pending = [], ""
        for line in body.splitlines():
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            commands.append(re.sub(r"\s+#\s.*$", "", pending + line))  # a trailing comment
            pending = ""
        assert commands, f"an empty shell block in README.md:\n{body}"
        blocks.append((commands[0], commands))
    return blocks


def find_block(prefix: str) -> list:
    found = [cmds for first, cmds in shell_blocks() if first.startswith(prefix)]
    assert len(found) == 1, f"README.md has {len(found)} shell blocks starting {prefix!r}"
    return found[0]


def test_every_shell_block_is_run_or_listed():
    firsts = [first for first, _ in shell_blocks()]
    run_here = [f for f in firsts if f.startswith((CLI_BLOCK, SECURITY_BLOCK))]
    assert len(run_here) == 2, firsts
    unlisted = [f for f in firsts if f not in run_here and f not in NOT_RUN]
    assert not unlisted, f"README shell blocks neither run nor listed in NOT_RUN: {unlisted}"
    stale = [f for f in NOT_RUN if f not in firsts]
    assert not stale, f"NOT_RUN lists blocks README.md no longer has: {stale}"
    for first, commands in shell_blocks():
        if first in NOT_RUN:
            print(f"README block not run ({NOT_RUN[first]}): {first}", file=sys.__stderr__)


@pytest.fixture(scope="module")
def dendro_path() -> str:
    path = os.environ.get("DENDRO") or str(ROOT / "build" / "client" / "dendro")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no dendro binary at {path} (set DENDRO)")
    return path


@pytest.fixture
def shell_env(dendro_path, dendrod_path, tmp_path, monkeypatch):
    """An environment whose PATH starts with dendro and dendrod."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dendro").symlink_to(os.path.abspath(dendro_path))
    (bin_dir / "dendrod").symlink_to(os.path.abspath(dendrod_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DENDRO_")}
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


class BlockRun:
    """Runs one README block's commands in `cwd`, recording every output."""

    def __init__(self, cwd: Path, env: dict) -> None:
        self.cwd, self.env = cwd, env
        self.state: list = []
        self.outputs: list = []  # (command, stdout)
        self.servers: list = []

    def run(self, command: str) -> str:
        if command.startswith(STATE_COMMANDS):
            self.state.append(command)
        if command.startswith("dendrod "):
            return self.start_server(command)
        script = "\n".join(["set -eo pipefail", *self.state, command])
        done = subprocess.run(["bash", "-c", script], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (f"README command failed (exit {done.returncode}): "
                                      f"{command}\nstdout:\n{done.stdout}\n"
                                      f"stderr:\n{done.stderr}")
        self.outputs.append((command, done.stdout))
        return done.stdout

    def start_server(self, command: str) -> str:
        port = int(re.search(r"--listen \S+:(\d+)", command).group(1))
        log = open(self.cwd / "dendrod.log", "ab")
        script = "\n".join(["set -eo pipefail", *self.state, "exec " + command])
        proc = subprocess.Popen(["bash", "-c", script], cwd=self.cwd, env=self.env,
                                stdout=log, stderr=log)
        self.servers.append((proc, log))
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (f"README's dendrod exited {proc.returncode}:\n"
                                         f"{(self.cwd / 'dendrod.log').read_text()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return ""
            assert time.monotonic() < deadline, "README's dendrod did not open its port"
            time.sleep(0.1)

    def stop(self) -> None:
        for proc, log in self.servers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            log.close()

    def output_of(self, prefix: str) -> str:
        found = [out for cmd, out in self.outputs if cmd.startswith(prefix)]
        assert len(found) == 1, f"{len(found)} commands ran starting {prefix!r}"
        return found[0]


def write_cli_inputs(d: Path) -> None:
    """The files the "Using the CLI" block names, with shapes that fit together:
    24-class logits (4 super-classes of 6) with labels, a held-out set, embeddings
    labelled like the logits, a 100-column matrix for --projection-dim 64, and
    120 classes of features for hppca (--superclasses 100) plus 10 new ones."""
    from test_client import hierarchical_logits
    rng = np.random.default_rng(2026)
    x, y = hierarchical_logits(1000, 4, 6, seed=21)
    xt, yt = hierarchical_logits(500, 4, 6, seed=22)
    np.save(d / "logits.npy", x)
    np.save(d / "y.npy", y.astype(np.int64))
    np.save(d / "test_logits.npy", xt)
    np.save(d / "y_test.npy", yt.astype(np.int64))  # also test.npy's classes below
    centres = rng.normal(0, 4, (24, 8))
    for name in ("emb.npy", "embeddings.npy"):
        np.save(d / name, (centres[y] + rng.normal(size=(1000, 8))).astype(np.float32))
    np.save(d / "wide.npy", rng.normal(size=(600, 100)).astype(np.float32))
    means = rng.normal(0, 3, (130, 32))
    labels = np.repeat(np.arange(120), 6)
    new_labels = np.repeat(np.arange(120, 130), 6)
    for stem, lab in (("feats", labels), ("new_feats", new_labels)):
        np.save(d / f"{stem}.npy", (means[lab] + rng.normal(size=(len(lab), 32))).astype(np.float32))
    np.save(d / "labels.npy", labels.astype(np.int64))
    np.save(d / "new_labels.npy", new_labels.astype(np.int64))
    np.save(d / "test.npy", (means[yt] + rng.normal(size=(500, 32))).astype(np.float32))


def test_readme_cli_example(server, shell_env, tmp_path):
    work = tmp_path / "cli"
    work.mkdir()
    write_cli_inputs(work)
    shell_env["DENDRO_SERVER"] = server.target  # as the block's text says dendro finds it
    block = BlockRun(work, shell_env)
    dataset = None
    appended = None
    try:
        for command in find_block(CLI_BLOCK):
            # SUBSTITUTIONS: "ds-…" stands for the id the block's upload printed.
            if "ds-…" in command:
                assert dataset is not None, f"'ds-…' before any upload: {command}"
                command = command.replace("ds-…", dataset)
            out = block.run(command)
            if command.startswith("dendro upload ") and "--append" in command:
                appended = out.strip()
                assert re.fullmatch(r"ds-[0-9a-z-]+", appended), out
            elif command.startswith("dendro upload "):
                dataset = out.strip()
                assert re.fullmatch(r"ds-[0-9a-z-]+", dataset), out
    finally:
        block.stop()

    # What the block's comments promise, checked on what it wrote.
    from scipy.cluster.hierarchy import is_valid_linkage
    z = np.load(work / "Z.npy")
    assert z.shape == (23, 4) and is_valid_linkage(z)
    assert (work / "tree.nwk").read_text().strip().endswith(";")
    assert json.loads((work / "tree.json").read_text())
    svg = ElementTree.parse(work / "tree.svg").getroot()
    leaves = [t for t in svg.iter("{http://www.w3.org/2000/svg}text")
              if t.get("class", "").startswith("leaf")]
    assert len(leaves) == 24
    assert len({t.get("class") for t in leaves}) == 20  # --color-level 20: 20 clusters
    supers = np.load(work / "superclasses.npy")
    assert supers.shape == (500,) and set(supers.tolist()) <= set(range(20))
    leaf_ids = np.load(work / "leaves.npy")
    assert leaf_ids.shape == (500,) and set(leaf_ids.tolist()) <= set(range(24))
    metrics = json.loads(block.output_of("dendro eval tree.json"))
    assert {"nmi", "ari", "acc", "dendrogram_purity"} <= set(metrics), metrics
    for name in ("tneb.json", "ghhc.nwk", "ghhc.json"):
        assert (work / name).stat().st_size > 0, name
    assert np.load(work / "pred.npy").shape == (500, 5)
    assert "cifar100" in block.output_of("dendro models list --name cifar100")
    labelled = subprocess.run(["dendro", "models", "get", "cifar100@stable", "--json"], cwd=work,
                              env=shell_env, capture_output=True, text=True, timeout=60)
    assert labelled.returncode == 0, labelled.stderr
    assert int(json.loads(labelled.stdout)["version"]) == 1
    assert dataset in block.output_of("dendro upload embeddings.npy")
    # "generation 2 of ds-…": the dataset's id now names the appended generation.
    newest = subprocess.run(["dendro", "datasets", "get", dataset, "--json"], cwd=work,
                            env=shell_env, capture_output=True, text=True, timeout=60)
    assert newest.returncode == 0, newest.stderr
    info = json.loads(newest.stdout)
    assert appended is not None and appended != dataset
    assert (info["id"], int(info["generation"]), int(info["rows"])) == (appended, 2, 2000), info
    # "emb's next version, EM from the last": fitted on the appended generation.
    emb = subprocess.run(["dendro", "models", "get", "emb", "--json"], cwd=work,
                         env=shell_env, capture_output=True, text=True, timeout=60)
    assert emb.returncode == 0, emb.stderr
    newest_emb = json.loads(emb.stdout)
    assert newest_emb["dataset_id"] == appended, newest_emb
    previous = int(newest_emb["version"]) - 1
    assert newest_emb["metadata"]["warm_start"] == f"emb:{previous}", newest_emb["metadata"]
    assert "warm_start_note" not in newest_emb["metadata"]
    assert (work / "tneb2.json").stat().st_size > 0


def test_readme_security_example(shell_env, tmp_path):
    work = tmp_path / "secure"
    work.mkdir()
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    # SUBSTITUTIONS: free loopback ports instead of 0.0.0.0:50051 and :50052, and
    # localhost for dendro.internal, which does not resolve here (the block's
    # server certificate names both).
    substitutions = {"0.0.0.0:50051": f"127.0.0.1:{ports[0]}",
                     "0.0.0.0:50052": f"127.0.0.1:{ports[1]}",
                     "dendro.internal:50051": f"localhost:{ports[0]}",
                     "dendro.internal:50052": f"localhost:{ports[1]}"}
    block = BlockRun(work, shell_env)

    def dendro(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["dendro", *args], cwd=work, env=shell_env, capture_output=True,
                              text=True, timeout=60)

    try:
        for command in find_block(SECURITY_BLOCK):
            for old, new in substitutions.items():
                command = command.replace(old, new)
            block.run(command)
        # Without the key the same call is refused: the key is what let them in.
        refused = dendro("--tls-ca", "tls/ca.pem", "--server", f"localhost:{ports[0]}",
                         "models", "list")
        assert refused.returncode == 1 and "API key" in refused.stderr, refused.stderr
        # The mutual-TLS server: a key without a certificate is told what is missing,
        # in one line.
        no_cert = dendro("--tls-ca", "tls/ca.pem", "--api-key-file", "ci.key", "--server",
                         f"localhost:{ports[1]}", "models", "list")
        assert no_cert.returncode == 1, no_cert
        assert "requires a client certificate" in no_cert.stderr, no_cert.stderr
        assert len(no_cert.stderr.strip().splitlines()) == 1, no_cert.stderr
        # A certificate of another CA is refused, and the message says why it may be.
        subprocess.run(["dendro", "certs", "new", "--ca-dir", "other", "--client", "etl-job"],
                       cwd=work, env=shell_env, check=True, capture_output=True, timeout=60)
        foreign = dendro("--tls-ca", "tls/ca.pem", "--tls-cert", "other/etl-job.pem",
                         "--tls-key", "other/etl-job.key", "--server", f"localhost:{ports[1]}",
                         "models", "list")
        assert foreign.returncode == 1 and "--tls_client_ca" in foreign.stderr, foreign.stderr
    finally:
        block.stop()
    # What each server said it was protected by, in one line at start.
    log = (work / "dendrod.log").read_text()
    security = [line for line in log.splitlines() if "] security: " in line]
    assert len(security) == 2, log
    assert ("authentication on, 1 key (1 writer), 0 certificate names; TLS on; mutual TLS off; "
            f"listening: gRPC 127.0.0.1:{ports[0]} (TLS)") in security[0], security
    assert ("authentication on, 1 key (1 writer), 1 certificate name (1 writer); TLS on; "
            "mutual TLS on") in security[1], security
    assert f"gRPC 127.0.0.1:{ports[1]} (TLS, client certificates)" in security[1], security
    key = (work / "ci.key").read_text().splitlines()
    assert len(key) == 1 and len(key[0]) >= 16  # only the key: its line went to the keys file
    assert (work / "ci.key").stat().st_mode & 0o077 == 0  # umask 077
    for private in ("tls/ca.key", "tls/server.key", "tls/etl-job.key", "keys"):
        assert (work / private).stat().st_mode & 0o077 == 0, private
    keys_lines = [line.split() for line in (work / "keys").read_text().splitlines()]
    assert keys_lines[0][1:] == ["ci-pipeline", "writer"]
    assert re.fullmatch(r"[0-9a-f]{64}", keys_lines[0][0]) and key[0] not in keys_lines[0]
    assert keys_lines[1] == ["cn:etl-job", "etl-job", "writer"]
    # The server certificate names what clients dial, and chains to the CA.
    if shutil.which("openssl") is not None:
        text = subprocess.run(["openssl", "x509", "-in", "tls/server.pem", "-noout", "-ext",
                               "subjectAltName,extendedKeyUsage"], cwd=work, check=True,
                              capture_output=True, text=True).stdout
        assert "DNS:dendro.internal" in text and "DNS:localhost" in text, text
        assert "TLS Web Server Authentication" in text, text
        for cert in ("tls/server.pem", "tls/etl-job.pem"):
            subprocess.run(["openssl", "verify", "-CAfile", "tls/ca.pem", cert], cwd=work,
                           check=True, capture_output=True)
    listings = [out for cmd, out in block.outputs if cmd.endswith("models list")]
    assert len(listings) == 3
