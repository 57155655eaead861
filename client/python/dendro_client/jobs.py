"""Jobs: long-running fits, with waiting and a dependency-free progress bar."""
from __future__ import annotations

import datetime
import shutil
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, TextIO, Union

import grpc

from .errors import DendroError, code_name
from .models import Model, _timestamp

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")
ProgressArg = Union[bool, Callable[["Job"], None]]


class ProgressBar:
    """A one-line text bar redrawn in place with carriage returns.

    Drawn only on an interactive stream: a terminal, or a Jupyter/IPython
    kernel's output (which honours ``\\r``). Elsewhere (logs, pipes) it
    prints nothing, so batch output stays clean.
    """

    def __init__(self, stream: Optional[TextIO] = None, width: int = 30) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.enabled = self.interactive(self.stream)
        self.interval = 0.1
        self._last = ""
        self._when = 0.0
        self._drawn = False

    @staticmethod
    def interactive(stream: TextIO) -> bool:
        """True on a terminal or inside a notebook kernel."""
        try:
            if stream.isatty():
                return True
        except (AttributeError, ValueError):
            return False
        return "ipykernel" in sys.modules

    def update(self, fraction: float, text: str, force: bool = False) -> None:
        """Redraws the bar at ``fraction`` (0..1) followed by ``text``.

        Redraws at most every ``interval`` seconds unless ``force`` or the
        bar is full; the line is cut to the terminal's width so it never wraps.
        """
        if not self.enabled:
            return
        fraction = min(max(fraction, 0.0), 1.0)
        now = time.monotonic()
        if self._drawn and not force and fraction < 1.0 and now - self._when < self.interval:
            return
        filled = int(round(fraction * self.width))
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {fraction * 100:5.1f}%  {text}"
        line = line[:max(self.width + 10, shutil.get_terminal_size().columns - 1)]
        if line == self._last:
            return
        self._when = now
        pad = " " * max(0, len(self._last) - len(line))
        self.stream.write("\r" + line + pad)
        self.stream.flush()
        self._last = line
        self._drawn = True

    def close(self) -> None:
        """Ends the line if a bar was drawn."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


class Job:
    """A submitted fit. Attributes reflect the last answer from the server;
    :meth:`refresh` re-reads them, :meth:`wait` follows the job to its end."""

    def __init__(self, client: "Client", proto: Any) -> None:
        self._client = client
        self._proto = proto

    @property
    def id(self) -> str:
        return self._proto.id

    @property
    def state(self) -> str:
        """"QUEUED", "RUNNING", "SUCCEEDED", "FAILED" or "CANCELLED"."""
        return self._client._pb.JobState.Name(self._proto.state).replace("JOB_STATE_", "")

    @property
    def done(self) -> bool:
        """True once the job is SUCCEEDED, FAILED or CANCELLED."""
        return self.state in TERMINAL_STATES

    @property
    def progress(self) -> float:
        """Fraction of the work done, in [0, 1]."""
        return float(self._proto.progress)

    @property
    def stage(self) -> str:
        """What the job is doing, e.g. "queued", "softmax", "merging"."""
        return self._proto.stage

    @property
    def error(self) -> Optional[DendroError]:
        """Why a FAILED or CANCELLED job ended, else None."""
        if self.state not in ("FAILED", "CANCELLED"):
            return None
        code = code_name(self._proto.error.code) if self._proto.error.code else self.state
        message = self._proto.error.message or f"job {self.id} {self.state.lower()}"
        err = DendroError(code, f"job {self.id} {self.state}: {message}", None)
        err.job = self  # type: ignore[attr-defined]
        return err

    @property
    def model_name(self) -> str:
        return self._proto.model_name or self._proto.spec.model_name

    @property
    def model_version(self) -> int:
        """The version created (set when SUCCEEDED, else 0)."""
        return int(self._proto.model_version)

    @property
    def dataset_id(self) -> str:
        return self._proto.spec.dataset_id

    @property
    def create_time(self) -> Optional[datetime.datetime]:
        return _timestamp(self._proto.create_time)

    @property
    def end_time(self) -> Optional[datetime.datetime]:
        return _timestamp(self._proto.end_time)

    @property
    def proto(self) -> Any:
        """The underlying dendro.v1.Job message."""
        return self._proto

    def refresh(self) -> "Job":
        """Re-reads the job from the server; returns self."""
        pb = self._client._pb
        self._proto = self._client._unary(self._client._jobs.GetJob, pb.GetJobRequest(id=self.id))
        return self

    def cancel(self) -> "Job":
        """Asks the server to cancel the job (idempotent; a finished job is
        unchanged); returns self with the answer's state."""
        pb = self._client._pb
        self._proto = self._client._unary(self._client._jobs.CancelJob,
                                          pb.CancelJobRequest(id=self.id))
        return self

    def model(self) -> Model:
        """The model version a SUCCEEDED job created; DendroError otherwise."""
        if self.state != "SUCCEEDED":
            err = self.error
            if err is not None:
                raise err
            raise DendroError("FAILED_PRECONDITION", f"job {self.id} is {self.state}, not done")
        return self._client.model(self.model_name, self.model_version)

    def wait(self, progress: ProgressArg = True, timeout: Optional[float] = None) -> Model:
        """Waits for the job to end and returns the model it created.

        ``progress``: True draws a bar on stderr when it is a terminal or a
        notebook (nothing otherwise); False draws nothing; a callable is
        called with this Job on every update instead. ``timeout``: seconds
        to wait at most (None: no limit). Follows the server's WatchJob
        stream, reconnecting if the connection drops.

        Raises DendroError when the job ends FAILED (the job error's code)
        or CANCELLED (code "CANCELLED"), and DendroError with code
        "DEADLINE_EXCEEDED" when ``timeout`` passes first; the job keeps
        running then (so it does after a KeyboardInterrupt).
        """
        pb = self._client._pb
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = ProgressBar() if progress is True else None
        callback = progress if callable(progress) else None
        retries = 0
        try:
            while not self.done:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise DendroError("DEADLINE_EXCEEDED",
                                      f"job {self.id} is still {self.state} "
                                      f"({self.progress:.0%}) after {timeout} s")
                try:
                    stream = self._client._jobs.WatchJob(
                        pb.WatchJobRequest(id=self.id), timeout=remaining,
                        metadata=self._client._metadata)
                    for update in stream:
                        self._proto = update
                        retries = 0
                        if bar is not None:
                            stage = f"  {self.stage}" if self.stage else ""
                            bar.update(self.progress, f"{self.id}  {self.state}{stage}",
                                       force=self.done)
                        if callback is not None:
                            callback(self)
                    if not self.done:  # the stream ended early: look again
                        self.refresh()
                except grpc.RpcError as e:
                    code = e.code() if hasattr(e, "code") else None
                    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                        continue  # re-checked at the top of the loop
                    if code == grpc.StatusCode.UNAVAILABLE and retries < 10:
                        retries += 1
                        time.sleep(min(0.2 * 2 ** retries, 5.0))
                        continue
                    raise DendroError.from_rpc_error(e, self._client.target,
                                                     self._client._tls) from None
        finally:
            if bar is not None:
                bar.close()
        err = self.error
        if err is not None:
            raise err
        return self._client.model(self.model_name, self.model_version)

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.state} {self.progress:.0%}>"
