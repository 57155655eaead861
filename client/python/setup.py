"""Build script: generates the gRPC stubs from proto/ into the built package.

The metadata lives in pyproject.toml; this file only adds a build_py step
that runs protoc (with /usr/bin/grpc_python_plugin, or grpcio-tools) on
../../proto/dendro/v1/dendro.proto (or $DENDRO_PROTO_DIR) and writes
dendro_pb2.py and dendro_pb2_grpc.py into dendro_client/_pb of the build
directory, with the import path fixed for that package. Nothing generated is
written into the source tree: the build directory and the egg-info live in
the system's temporary directory (pip builds in the source tree otherwise,
leaving build/ and *.egg-info/ in a checkout).
"""
import importlib.util
import os
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _stubs_module():
    # Loaded by path: importing dendro_client would need grpc and numpy.
    spec = importlib.util.spec_from_file_location("_dendro_stubs",
                                                  HERE / "dendro_client" / "_stubs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithStubs(build_py):
    """build_py, then protoc into <build_lib>/dendro_client/_pb."""

    def run(self):
        super().run()
        if self.dry_run:
            return
        stubs = _stubs_module()
        out = Path(self.build_lib) / "dendro_client" / "_pb"
        for path in stubs.generate(out, stubs.default_proto_dir()):
            self.announce(f"generated {path}", level=2)

    def get_outputs(self, include_bytecode=1):
        out = Path(self.build_lib) / "dendro_client" / "_pb"
        return super().get_outputs(include_bytecode) + [
            str(out / "dendro_pb2.py"), str(out / "dendro_pb2_grpc.py")]


_SCRATCH = Path(tempfile.gettempdir()) / f"dendro-client-build-{os.getuid()}"
(_SCRATCH / "egg-info").mkdir(parents=True, exist_ok=True)

setup(cmdclass={"build_py": BuildPyWithStubs},
      options={"build": {"build_base": str(_SCRATCH / "build")},
               "egg_info": {"egg_base": str(_SCRATCH / "egg-info")}})
