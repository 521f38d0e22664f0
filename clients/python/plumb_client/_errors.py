"""Plumb's errors as Python exceptions.

pyarrow raises its own classes for gRPC statuses (ArrowKeyError for
NOT_FOUND, ArrowInvalid for INVALID_ARGUMENT, Flight*Error for the rest)
and wraps the server's message in framing; these carry the server's
message alone, which names the block, queue or group concerned.
"""
from __future__ import annotations

import contextlib
import re
import time
from typing import Iterator, Optional

import pyarrow as pa
import pyarrow.flight as fl


class PlumbError(Exception):
    """An error the server answered, or a protocol error; str() is the message."""

    code = "unknown"


class NotFound(PlumbError, KeyError):
    """No such block, queue, group, stage or job."""

    code = "not found"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class InvalidArgument(PlumbError, ValueError):
    """The request was malformed: a bad name, ticket or body."""

    code = "invalid argument"


class JobRejected(InvalidArgument):
    """submit_job's job was rejected; str() says why, result is the answer."""

    code = "rejected"

    def __init__(self, message: str, result: dict):
        super().__init__(message)
        self.result = result


class PermissionDenied(PlumbError):
    """The user may not do this to this queue or group."""

    code = "permission denied"


class Unauthenticated(PlumbError):
    """No valid login, token or API key."""

    code = "unauthenticated"


class Unavailable(PlumbError):
    """The server cannot be reached, or is going down."""

    code = "unavailable"


class ResourceExhausted(PlumbError):
    """A limit was reached: the store is full, a read is too large, too many groups."""

    code = "resource exhausted"


class FailedPrecondition(PlumbError):
    """The server's state refuses it: a block already stored with other
    bytes, a lease that expired, a group that is a stage's."""

    code = "failed precondition"


class AlreadyExists(PlumbError):
    """What the call would create exists already."""

    code = "already exists"


class Timeout(PlumbError, TimeoutError):
    """The call's deadline (connect(timeout=...)) passed before the answer."""

    code = "deadline exceeded"


class Cancelled(PlumbError):
    """The call was cancelled, by the client or the server shutting down."""

    code = "cancelled"


class Unimplemented(PlumbError, NotImplementedError):
    """The server does not do this (an older server, or no pipelines)."""

    code = "unimplemented"


class Internal(PlumbError):
    """The server failed; its log says where. A bug to report."""

    code = "internal"


# Every gRPC status, by the words pyarrow writes for it ("Flight returned
# ... error" for codes Flight has, "gRPC returned ... error" for others,
# sometimes after Arrow's own status, "Unknown: "; all of it changes
# between pyarrow releases).
_BY_WORDS = {
    "not found": NotFound,
    "invalid argument": InvalidArgument,
    "out of range": InvalidArgument,
    "permission denied": PermissionDenied,
    "unauthorized": PermissionDenied,
    "unauthenticated": Unauthenticated,
    "unavailable": Unavailable,
    "resource exhausted": ResourceExhausted,
    "precondition failed": FailedPrecondition,
    "failed precondition": FailedPrecondition,
    "aborted": FailedPrecondition,
    "already exists": AlreadyExists,
    "timeout": Timeout,
    "timed out": Timeout,
    "deadline exceeded": Timeout,
    "cancelled": Cancelled,
    "unimplemented": Unimplemented,
    "not implemented": Unimplemented,
    "internal": Internal,
    "unknown": PlumbError,
}
_FRAME = re.compile(r"^(?:[A-Za-z ]+: )?(?:(?:Flight|gRPC) returned (?P<code>[a-z ]+?) error|Flight cancelled call), with message: (?P<msg>.*?)"
                    r"(?:\. gRPC client debug context:.*|\. Client context:.*)?$", re.S)


# The class, when pyarrow's text names no status: by the exception pyarrow
# raised, most specific first (Flight errors before the Arrow ones).
_BY_CLASS = [
    (fl.FlightUnauthenticatedError, Unauthenticated),
    (fl.FlightUnauthorizedError, PermissionDenied),
    (fl.FlightUnavailableError, Unavailable),
    (fl.FlightTimedOutError, Timeout),
    (fl.FlightCancelledError, Cancelled),
    (fl.FlightInternalError, Internal),
    (pa.ArrowKeyError, NotFound),
    (pa.ArrowNotImplementedError, Unimplemented),
    (pa.ArrowInvalid, InvalidArgument),
]


def translate(e: Exception) -> PlumbError:
    """The PlumbError for an exception pyarrow raised: the class by the
    gRPC status, the message the server's alone."""
    text = str(e)
    m = _FRAME.match(text)
    msg = m.group("msg") if m else text
    cls = _BY_WORDS.get(m.group("code") or "") if m else None
    if cls is None:
        cls = next((c for raised, c in _BY_CLASS if isinstance(e, raised)), PlumbError)
    return cls(msg)


@contextlib.contextmanager
def translated(timeout: Optional[float] = None, started: Optional[float] = None) -> Iterator[None]:
    """Raise pyarrow's Flight errors as PlumbErrors, keeping the original as
    __cause__. A call that had a timeout and ran past it is a Timeout even
    when pyarrow says CANCELLED: gRPC ends a stream whose deadline passed by
    cancelling it, and which of the two pyarrow reports is a race. started
    is when the call began (time.monotonic()), for a stream read after it
    was opened; now when None."""
    start = time.monotonic() if started is None else started
    try:
        yield
    except PlumbError:
        raise
    except (pa.ArrowException, fl.FlightError) as e:
        err = translate(e)
        if isinstance(err, Cancelled) and timeout and time.monotonic() - start >= timeout:
            err = Timeout(str(err))
        raise err from e
