"""Generation and loading of the gRPC stubs for dendro/v1/dendro.proto.

The stubs are never stored in the source tree. They come from one of two
places:

* An installed copy: ``setup.py``'s ``build_py`` step runs :func:`generate`
  and writes ``dendro_pb2.py`` and ``dendro_pb2_grpc.py`` into the
  ``dendro_client._pb`` package of the build, so an installed package needs
  neither protoc nor the proto files at run time.
* A source checkout (``client/python`` on ``sys.path``, as the tests use it):
  :func:`load` finds no generated modules in ``dendro_client/_pb``, so it
  generates them from the repository's ``proto/`` into a cache directory
  named after a hash of the proto file and the generator, and adds that
  directory to the ``dendro_client._pb`` package path. An edited proto hence
  gets fresh stubs; an unchanged one is generated once per cache.

This module uses the standard library only, so ``setup.py`` can load it
before anything else is installed.

Environment variables:

``DENDRO_PROTO_DIR``
    The directory holding ``dendro/v1/dendro.proto`` (default: ``proto/`` of
    the repository this file lives in).
``DENDRO_STUB_CACHE``
    Where generated stubs are cached (default: ``$XDG_CACHE_HOME`` or
    ``~/.cache``, then the system temp directory, whichever is writable).
``PROTOC`` / ``GRPC_PYTHON_PLUGIN``
    The protoc binary and the gRPC Python plugin (default: found on ``PATH``,
    then ``/usr/bin``). If neither protoc nor the plugin is found,
    ``grpc_tools.protoc`` (the ``grpcio-tools`` package) is used when it is
    importable.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import List, Optional, Tuple

PROTO_FILE = "dendro/v1/dendro.proto"
PB_MODULE = "dendro_pb2"
GRPC_MODULE = "dendro_pb2_grpc"
PACKAGE = "dendro_client._pb"
# Bumped whenever the rewriting below changes, so cached stubs are redone.
_GENERATOR_VERSION = "1"


class StubGenerationError(RuntimeError):
    """protoc is missing or failed, or its output was not as expected."""


def default_proto_dir() -> Path:
    """The directory holding dendro/v1/dendro.proto.

    ``$DENDRO_PROTO_DIR`` if set, else ``proto/`` three levels above this
    file (``client/python/dendro_client`` -> the repository root).
    """
    env = os.environ.get("DENDRO_PROTO_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "proto"


def _which(env: str, name: str) -> Optional[str]:
    explicit = os.environ.get(env)
    if explicit:
        return explicit
    found = shutil.which(name)
    if found:
        return found
    fallback = Path("/usr/bin") / name
    return str(fallback) if fallback.exists() else None


def _protoc_command(proto_dir: Path, out_dir: Path) -> List[str]:
    protoc = _which("PROTOC", "protoc")
    plugin = _which("GRPC_PYTHON_PLUGIN", "grpc_python_plugin")
    if protoc and plugin:
        return [protoc, f"--plugin=protoc-gen-grpc_python={plugin}",
                f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
                f"-I{proto_dir}", str(proto_dir / PROTO_FILE)]
    try:
        import grpc_tools  # noqa: F401  (grpcio-tools bundles protoc and the plugin)
    except ImportError:
        raise StubGenerationError(
            "cannot generate the dendro gRPC stubs: protoc and grpc_python_plugin were not "
            "found (Debian: apt-get install protobuf-compiler protobuf-compiler-grpc; or set "
            "PROTOC and GRPC_PYTHON_PLUGIN), and grpcio-tools is not installed") from None
    include = Path(grpc_tools.__file__).parent / "_proto"
    return [sys.executable, "-m", "grpc_tools.protoc", f"-I{include}",
            f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
            f"-I{proto_dir}", str(proto_dir / PROTO_FILE)]


def generate(out_dir: Path, proto_dir: Optional[Path] = None) -> List[Path]:
    """Generates the stubs into ``out_dir`` as two flat modules.

    Writes ``out_dir/dendro_pb2.py`` and ``out_dir/dendro_pb2_grpc.py``; the
    latter's absolute import of ``dendro.v1.dendro_pb2`` is rewritten into a
    relative one, so the pair works inside any package (``dendro_client._pb``)
    and never shadows or collides with a top-level ``dendro`` package. Returns
    the written paths. Raises StubGenerationError if protoc cannot run or fails.
    """
    proto_dir = Path(proto_dir) if proto_dir is not None else default_proto_dir()
    if not (proto_dir / PROTO_FILE).is_file():
        raise StubGenerationError(
            f"cannot generate the dendro gRPC stubs: {proto_dir / PROTO_FILE} does not exist "
            "(set DENDRO_PROTO_DIR to the repository's proto/ directory)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dendro_protoc_") as raw:
        cmd = _protoc_command(proto_dir, Path(raw))
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise StubGenerationError(
                f"protoc failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr.strip()}")
        src = Path(raw) / "dendro" / "v1"
        pb_text = (src / f"{PB_MODULE}.py").read_text()
        grpc_text = (src / f"{GRPC_MODULE}.py").read_text()
    absolute = f"from dendro.v1 import {PB_MODULE} as"
    if absolute not in grpc_text:
        raise StubGenerationError(
            f"unexpected protoc output: '{absolute}' not found in {GRPC_MODULE}.py")
    grpc_text = grpc_text.replace(absolute, f"from . import {PB_MODULE} as")
    # The module name recorded on the generated classes (used by pickle).
    pb_text = pb_text.replace(f"'dendro.v1.{PB_MODULE}'", f"'{PACKAGE}.{PB_MODULE}'")
    written = []
    for name, text in ((PB_MODULE, pb_text), (GRPC_MODULE, grpc_text)):
        path = out_dir / f"{name}.py"
        path.write_text(text)
        written.append(path)
    return written


def _cache_roots() -> List[Path]:
    roots = []
    if os.environ.get("DENDRO_STUB_CACHE"):
        roots.append(Path(os.environ["DENDRO_STUB_CACHE"]))
    xdg = os.environ.get("XDG_CACHE_HOME")
    roots.append(Path(xdg) / "dendro_client" if xdg else
                 Path.home() / ".cache" / "dendro_client")
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    roots.append(Path(tempfile.gettempdir()) / f"dendro_client-{uid}")
    return roots


def cached_stub_dir(proto_dir: Optional[Path] = None) -> Path:
    """Generates the stubs into the cache unless already there; returns the directory.

    The directory name carries a hash of the proto file and of this
    generator, so it never holds stale stubs. Generation goes to a temporary
    sibling that is renamed into place, so concurrent processes (parallel
    tests) never see half-written files.
    """
    proto_dir = Path(proto_dir) if proto_dir is not None else default_proto_dir()
    proto = proto_dir / PROTO_FILE
    try:
        digest = hashlib.sha256(proto.read_bytes() + _GENERATOR_VERSION.encode()).hexdigest()
    except OSError as e:
        raise StubGenerationError(
            f"the dendro gRPC stubs are not installed and {proto} cannot be read ({e}); "
            "install the package (pip install client/python) or set DENDRO_PROTO_DIR") from None
    errors = []
    for root in _cache_roots():
        final = root / f"stubs-{digest[:20]}"
        if (final / f"{GRPC_MODULE}.py").is_file():
            return final
        try:
            root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".stubs-", dir=root))
        except OSError as e:
            errors.append(f"{root}: {e}")
            continue
        try:
            generate(staging, proto_dir)
            try:
                os.rename(staging, final)
            except OSError:
                if not (final / f"{GRPC_MODULE}.py").is_file():
                    raise
                # Another process got there first with identical stubs.
                shutil.rmtree(staging, ignore_errors=True)
            return final
        except OSError as e:
            shutil.rmtree(staging, ignore_errors=True)
            errors.append(f"{root}: {e}")
    raise StubGenerationError("no writable cache directory for the dendro gRPC stubs: " +
                              "; ".join(errors))


def load() -> Tuple[ModuleType, ModuleType]:
    """Returns the (dendro_pb2, dendro_pb2_grpc) modules.

    Uses the stubs installed inside ``dendro_client._pb`` when present,
    otherwise generates them into the cache (see :func:`cached_stub_dir`) and
    adds that directory to the package's ``__path__``. Raises ImportError
    (from StubGenerationError) when neither works.
    """
    pkg = importlib.import_module(PACKAGE)
    installed = any((Path(p) / f"{GRPC_MODULE}.py").is_file() for p in pkg.__path__)
    if not installed:
        try:
            stub_dir = cached_stub_dir()
        except StubGenerationError as e:
            raise ImportError(str(e)) from e
        if str(stub_dir) not in pkg.__path__:
            pkg.__path__.append(str(stub_dir))
    pb = importlib.import_module(f"{PACKAGE}.{PB_MODULE}")
    rpc = importlib.import_module(f"{PACKAGE}.{GRPC_MODULE}")
    return pb, rpc
