"""Python client of a Plumb server, over Arrow Flight with pyarrow.

    import plumb_client as plumb
    c = plumb.connect("127.0.0.1:8815")
    for block in c.consume("pcap.sz", group="archive"):
        ...  # acknowledged when the loop moves on to the next block

Every call speaks the protocol docs/protocol.md documents; nothing
here is needed that a plain pyarrow.flight client could not do, it only
saves writing the JSON tickets and the block framing by hand.
"""
from ._client import (
    Block,
    Client,
    Event,
    Stream,
    Window,
    connect,
)
from ._errors import (
    AlreadyExists,
    Cancelled,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    JobRejected,
    NotFound,
    PermissionDenied,
    PlumbError,
    ResourceExhausted,
    Timeout,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)

__all__ = [
    "AlreadyExists",
    "Block",
    "Cancelled",
    "Client",
    "Event",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "JobRejected",
    "NotFound",
    "PermissionDenied",
    "PlumbError",
    "ResourceExhausted",
    "Stream",
    "Timeout",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Window",
    "connect",
]
