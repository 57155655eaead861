"""The exception every failed server call raises."""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import grpc


class DendroError(Exception):
    """A call to dendrod failed, or a job ended FAILED or CANCELLED.

    Attributes:
        code: the gRPC status code name, e.g. ``"NOT_FOUND"``,
            ``"INVALID_ARGUMENT"``, ``"UNAUTHENTICATED"``, ``"UNAVAILABLE"``;
            for a job that did not succeed, the job error's code name
            (``"CANCELLED"`` for a cancelled job).
        message: the server's message (or the client's, when no server
            answered).
        request_id: the ``x-request-id`` the server returned in the trailing
            metadata, which names the call in the server's log; None when
            the server did not answer.
    """

    def __init__(self, code: str, message: str, request_id: Optional[str] = None) -> None:
        self.code = code
        self.message = message
        self.request_id = request_id
        super().__init__(code, message, request_id)

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        if self.request_id:
            text += f" [request {self.request_id}]"
        return text

    def __repr__(self) -> str:
        return f"DendroError({self.code!r}, {self.message!r}, {self.request_id!r})"

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError, target: str = "") -> "DendroError":
        """Converts a grpc.RpcError, keeping its code, details and request id."""
        code = error.code() if hasattr(error, "code") else None
        name = code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
        details = error.details() if hasattr(error, "details") else None
        message = details or f"the server answered {name}"
        request_id = None
        try:
            trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
        except Exception:  # a call that never reached the server may have none
            trailers = None
        for key, value in trailers or ():
            if key == "x-request-id":
                request_id = value.decode() if isinstance(value, bytes) else value
        if name == "UNAVAILABLE" and target:
            message = f"cannot reach dendrod at {target}: {message}"
        elif name == "UNAUTHENTICATED":
            message += " (pass Client(api_key=...) or set DENDRO_API_KEY)"
        return cls(name, message, request_id)


# Job error codes are google.rpc.Code values; their names match grpc.StatusCode.
_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


def code_name(value: int) -> str:
    """The canonical name of a google.rpc.Code number (e.g. 5 -> "NOT_FOUND")."""
    return _CODE_NAMES.get(value, "UNKNOWN")


@contextlib.contextmanager
def translate(target: str = "") -> Iterator[None]:
    """Re-raises any grpc.RpcError inside the block as a DendroError."""
    try:
        yield
    except grpc.RpcError as e:
        raise DendroError.from_rpc_error(e, target) from None
