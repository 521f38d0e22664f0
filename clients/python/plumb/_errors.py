"""Plumb's errors as Python exceptions.

pyarrow raises its own classes for gRPC statuses (ArrowKeyError for
NOT_FOUND, ArrowInvalid for INVALID_ARGUMENT, Flight*Error for the rest)
and wraps the server's message in framing; these carry the server's
message alone, which names the block, queue or group concerned.
"""
from __future__ import annotations

import contextlib
import re
from typing import Iterator

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


_BY_CODE = {c.code: c for c in (NotFound, InvalidArgument, PermissionDenied, Unauthenticated,
                                 Unavailable, ResourceExhausted)}
_FRAME = re.compile(r"^Flight returned (?P<code>[a-z ]+?) error, with message: (?P<msg>.*?)"
                    r"(?:\. gRPC client debug context:.*|\. Client context:.*)?$", re.S)


def translate(e: Exception) -> PlumbError:
    """The PlumbError for an exception pyarrow raised."""
    text = str(e)
    m = _FRAME.match(text)
    msg = m.group("msg") if m else text
    code = m.group("code") if m else ""
    if isinstance(e, fl.FlightUnauthenticatedError):
        cls = Unauthenticated
    elif isinstance(e, fl.FlightUnauthorizedError):
        cls = PermissionDenied
    elif isinstance(e, fl.FlightUnavailableError):
        cls = Unavailable
    else:
        cls = _BY_CODE.get(code)
        if cls is None and isinstance(e, pa.ArrowKeyError):
            cls = NotFound
        elif cls is None and isinstance(e, pa.ArrowInvalid):
            cls = InvalidArgument
        elif cls is None:
            cls = PlumbError
    return cls(msg)


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Raise pyarrow's Flight errors as PlumbErrors, keeping the original as __cause__."""
    try:
        yield
    except PlumbError:
        raise
    except (pa.ArrowException, fl.FlightError) as e:
        raise translate(e) from e
