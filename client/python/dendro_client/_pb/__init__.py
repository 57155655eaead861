"""Generated gRPC stubs for dendro/v1/dendro.proto (see dendro_client._stubs).

An installed package carries dendro_pb2.py and dendro_pb2_grpc.py here,
written by setup.py at build time. In a source checkout this directory holds
only this file, and dendro_client._stubs.load() adds a cache directory with
freshly generated stubs to this package's path.
"""
