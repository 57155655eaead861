"""The exception every failed server call raises."""
from __future__ import annotations

import contextlib
import socket
import ssl
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
    def from_rpc_error(cls, error: grpc.RpcError, target: str = "",
                       tls: Optional[str] = None) -> "DendroError":
        """Converts a grpc.RpcError, keeping its code, details and request id.

        ``tls`` says how the channel was made (None: plaintext; "no-cert":
        TLS without a client certificate; "cert": with one), to explain a
        connection the server dropped."""
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
        if (name == "UNAVAILABLE" and tls == "no-cert" and "Socket closed" in message
                and _requires_client_certificate(target)):
            message = (f"dendrod at {target} requires a client certificate (mutual TLS) and "
                       "this client sent none: pass Client(tls_cert=..., tls_key=...), signed "
                       "by the CA the server names with --tls_client_ca")
        elif name == "UNAVAILABLE" and target:
            message = f"cannot reach dendrod at {target}: {message}"
        elif name == "UNAUTHENTICATED":
            message += " (pass Client(api_key=...) or set DENDRO_API_KEY)"
        return cls(name, message, request_id)


def _requires_client_certificate(target: str) -> bool:
    """True if the TLS server at HOST:PORT refuses a client that sends no
    certificate: an alert "certificate required", or (gRPC's servers) the
    connection closed right after the handshake, where a server that took the
    client would send its HTTP/2 settings. The server's certificate is not
    checked: this only asks what the server wants. At most about 3 s."""
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or "/" in target or "," in target:
        return False
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, int(port)), timeout=3) as raw:
            with context.wrap_socket(raw, server_hostname=host) as conn:
                # TLS 1.3: the server's verdict arrives after the handshake.
                return conn.version() == "TLSv1.3" and conn.recv(1) == b""
    except ssl.SSLError as e:
        return "CERTIFICATE_REQUIRED" in str(e).upper().replace(" ", "_")
    except OSError:
        return False


# Job error codes are google.rpc.Code values; their names match grpc.StatusCode.
_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


def code_name(value: int) -> str:
    """The canonical name of a google.rpc.Code number (e.g. 5 -> "NOT_FOUND")."""
    return _CODE_NAMES.get(value, "UNKNOWN")


@contextlib.contextmanager
def translate(target: str = "", tls: Optional[str] = None) -> Iterator[None]:
    """Re-raises any grpc.RpcError inside the block as a DendroError."""
    try:
        yield
    except grpc.RpcError as e:
        raise DendroError.from_rpc_error(e, target, tls) from None
