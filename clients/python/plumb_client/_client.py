"""The client: connections, blocks, groups, windows, streams and records."""
from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import hashlib
import io
import json
import os
import random
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import pyarrow as pa
import pyarrow.flight as fl

from ._errors import Cancelled, InvalidArgument, JobRejected, NotFound, PermissionDenied, PlumbError, translated

BLOCK_SCHEMA = pa.schema([("offset", pa.int64()), ("data", pa.binary())])
CHUNK = 1 << 20  # block bytes per record batch, as the server sends them
_NAME = re.compile(r"^(?P<time>\d{8}-\d{6})-(?P<seq>\d+)\.(?P<instance>[^.]+)\.(?P<queue>.+)$")

Data = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]
Where = Union[Mapping[str, Any], Sequence[Tuple[str, str, Any]]]


def _start(start: Union[str, _dt.datetime]) -> str:
    """A group's start as the ticket says it: a name, or a time in RFC 3339."""
    if isinstance(start, _dt.datetime):
        if start.tzinfo is None:
            raise InvalidArgument(f"start={start!r}: give a timezone-aware datetime (datetime.timezone.utc), "
                                  "as block times are UTC")
        return start.astimezone(_dt.timezone.utc).isoformat().replace("+00:00", "Z")
    return start


def _parse_name(name: str) -> Tuple[str, str, int, _dt.datetime]:
    m = _NAME.match(name)
    if not m:
        raise InvalidArgument(f"{name!r} is not a block name: want DATE-TIME-SEQ.SITE.QUEUE, "
                              "such as 20250505-151105-00000001.lax.pcap.sz")
    t = _dt.datetime.strptime(m["time"], "%Y%m%d-%H%M%S").replace(tzinfo=_dt.timezone.utc)
    return m["queue"], m["instance"], int(m["seq"]), t


@dataclass
class Block:
    """A block as read: its name, bytes and checksum. A block written to a
    file as it came (consume(..., spool=DIR)) has path set and data empty:
    open() reads either."""

    name: str
    data: bytes
    sha256: str
    path: Optional[str] = None

    def open(self) -> "io.BufferedIOBase":
        """The block's bytes as a file: its file when spooled, else its data."""
        if self.path is not None:
            return open(self.path, "rb")
        return io.BytesIO(self.data)

    @property
    def queue(self) -> str:
        return _parse_name(self.name)[0]

    @property
    def instance(self) -> str:
        """The site that cut it."""
        return _parse_name(self.name)[1]

    @property
    def seq(self) -> int:
        return _parse_name(self.name)[2]

    @property
    def time(self) -> _dt.datetime:
        """Its event time, from the name (UTC)."""
        return _parse_name(self.name)[3]


@dataclass
class Event:
    """Something a stream says between blocks: a gap, a skip, late blocks, or its end."""

    event: str
    next: int
    missing: int = 0
    late: List[int] = field(default_factory=list)


@dataclass
class Window:
    """A complete window: which blocks it holds, lacks or got late, and its blocks."""

    id: str
    instance: str
    present: List[int]
    missing: List[int]
    late: List[int]
    revision: int
    reason: str
    start: Optional[str]
    end: Optional[str]
    blocks: List[Block]
    # For a stretch of windows with no block (reason "empty"): how many
    # it stands for, from id on, over start to end.
    empty: int = 0


def _frames(reader: fl.FlightStreamReader, spool: Optional[str] = None) -> Iterator[Union[Block, dict]]:
    """Blocks (checked against their SHA-256), and the app_metadata of
    batches that are not blocks, as they come on a DoGet stream. With
    spool, a directory, each block's bytes go to a file there as they come
    (DIR/NAME, written as DIR/.NAME.part until whole and checked): memory
    holds what gRPC's receive window lets arrive ahead, not the block."""
    cur: Optional[dict] = None
    buf = bytearray()
    got = 0  # bytes of the current block so far
    digest = None
    out = None  # the spool file being written
    try:
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            meta = chunk.app_metadata
            if meta is not None:
                if cur is not None:
                    raise PlumbError(f"protocol error: block {cur['name']}: next header before its last "
                                     f"{cur['size'] - got} bytes")
                obj = json.loads(meta.to_pybytes())
                if not obj.get("name"):
                    yield obj  # an event or a window header
                    continue
                if "/" in obj["name"] or obj["name"].startswith("."):
                    raise PlumbError(f"protocol error: block name {obj['name']!r}")
                cur, buf, got, digest = obj, bytearray(), 0, hashlib.sha256()
                if spool is not None:
                    out = open(os.path.join(spool, "." + cur["name"] + ".part"), "wb")
            if chunk.data is not None and chunk.data.num_rows:
                if cur is None:
                    raise PlumbError("protocol error: block bytes before any block header")
                offsets, datas = chunk.data.column("offset"), chunk.data.column("data")
                for i in range(chunk.data.num_rows):
                    off = offsets[i].as_py()
                    if off != got:
                        raise PlumbError(f"protocol error: block {cur['name']}: offset {off}, expected {got}")
                    data = memoryview(datas[i].as_buffer())  # the batch's bytes, not a copy
                    digest.update(data)
                    got += len(data)
                    if out is not None:
                        out.write(data)
                    else:
                        buf.extend(data)
            if cur is not None and got >= cur["size"]:
                sum_ = digest.hexdigest()
                if got != cur["size"] or sum_ != cur["sha256"]:
                    raise PlumbError(f"block {cur['name']}: received {got} bytes with sha256 {sum_}, "
                                     f"header says {cur['size']} bytes with sha256 {cur['sha256']}")
                if out is not None:
                    out.close()
                    path = os.path.join(spool, cur["name"])
                    os.replace(out.name, path)
                    out = None
                    yield Block(cur["name"], b"", sum_, path)
                else:
                    yield Block(cur["name"], bytes(buf), sum_)
                cur = None
        if cur is not None:
            raise PlumbError(f"block {cur['name']}: stream ended with {cur['size'] - got} bytes left")
    finally:
        if out is not None:
            out.close()
            os.unlink(out.name)


class _Idle:
    """Cancels a reader when no frame came for timeout seconds, and makes
    the cancellation it caused the loop's normal end."""

    def __init__(self, reader: fl.FlightStreamReader, timeout: Optional[float]):
        self._reader, self._timeout = reader, timeout
        self._timer: Optional[threading.Timer] = None
        self.fired = False
        self.start()

    def _fire(self) -> None:
        self.fired = True
        self._reader.cancel()

    def start(self) -> None:
        if self._timeout is not None:
            self._timer = threading.Timer(self._timeout, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    @contextlib.contextmanager
    def ends(self) -> Iterator[None]:
        """The reader cancelled for idleness ends the loop, with no error."""
        try:
            yield
        except (Cancelled, fl.FlightCancelledError):
            if not self.fired:
                raise


class Client:
    """A connection to a Plumb server. Make one with connect()."""

    def __init__(self, flight: fl.FlightClient, options: fl.FlightCallOptions, timeout: Optional[float] = None,
                 _open: Optional[Callable[[int], Tuple[fl.FlightClient, fl.FlightCallOptions]]] = None, _servers: int = 1):
        self._fc = flight
        self._opts = options
        self._timeout = timeout  # each call's, for telling a deadline from a cancel
        self._open = _open  # connects to the i-th server named, when several were
        self._servers = _servers
        self._at = 0

    def _failover(self, call: Callable[[], Any]) -> Any:
        """Run call(); when its server is unavailable and connect() was given
        several, move to the next and call again, each server once."""
        left = self._servers
        while True:
            try:
                return call()
            except fl.FlightUnavailableError:
                left -= 1
                if self._open is None or left <= 0:
                    raise
                self._at = (self._at + 1) % self._servers
                old = self._fc
                self._fc, self._opts = self._open(self._at)
                try:
                    old.close()
                except (pa.ArrowException, fl.FlightError):
                    pass

    @property
    def flight(self) -> fl.FlightClient:
        """The pyarrow Flight client underneath, for calls this class has no method for."""
        return self._fc

    @property
    def options(self) -> fl.FlightCallOptions:
        """The call options (login headers) every call here sends."""
        return self._opts

    def close(self) -> None:
        self._fc.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # Actions.

    def action(self, typ: str, body: Any = None) -> List[Any]:
        """Run a DoAction with a JSON body; its answers, decoded."""
        raw = json.dumps({} if body is None else body).encode()
        with translated(self._timeout):
            return self._failover(lambda: [json.loads(r.body.to_pybytes())
                                           for r in self._fc.do_action(fl.Action(typ, raw), options=self._opts)])

    def _do_get(self, ticket: Mapping[str, Any]) -> fl.FlightStreamReader:
        with translated(self._timeout):
            return self._failover(lambda: self._fc.do_get(fl.Ticket(json.dumps(ticket).encode()), options=self._opts))

    # Blocks.

    def put(self, name: str, data: Data) -> str:
        """Upload one block; "stored", or "duplicate" if the server holds it already.

        data is the block's bytes or the path of a file holding them.
        """
        return self.put_many([(name, data)])[0]

    def put_many(self, blocks: Iterable[Tuple[str, Data]]) -> List[str]:
        """Upload blocks, one call per queue and site; their statuses, in order."""
        out: List[str] = []
        batch: List[Tuple[str, bytes]] = []
        key: Optional[Tuple[str, str]] = None
        for name, data in blocks:
            queue, instance, _, _ = _parse_name(name)
            if not isinstance(data, (bytes, bytearray, memoryview)):
                with open(data, "rb") as f:
                    data = f.read()
            if key is not None and key != (queue, instance):
                out += self._put(key, batch)
                batch = []
            key = (queue, instance)
            batch.append((name, bytes(data)))
        if key is not None:
            out += self._put(key, batch)
        return out

    def _put(self, key: Tuple[str, str], blocks: List[Tuple[str, bytes]]) -> List[str]:
        with translated(self._timeout):
            # Sent again whole to the next server: the server answers a
            # block it holds already as a duplicate.
            results = self._failover(lambda: self._put_once(key, blocks))
        if len(results) != len(blocks):
            raise PlumbError(f"queue {key[0]}: the server answered {len(results)} of {len(blocks)} blocks")
        return results

    def _put_once(self, key: Tuple[str, str], blocks: List[Tuple[str, bytes]]) -> List[str]:
        cmd = json.dumps({"queue": key[0], "instance": key[1]}).encode()
        results: List[str] = []
        writer, reader = self._fc.do_put(fl.FlightDescriptor.for_command(cmd), BLOCK_SCHEMA, options=self._opts)
        try:
            for name, data in blocks:
                header = json.dumps({"name": name, "size": len(data),
                                     "sha256": hashlib.sha256(data).hexdigest()}).encode()
                offsets = range(0, len(data), CHUNK) or [0]
                for i, off in enumerate(offsets):
                    piece = data[off:off + CHUNK]
                    if piece or len(data):
                        batch = pa.record_batch([pa.array([off], pa.int64()), pa.array([piece], pa.binary())],
                                                schema=BLOCK_SCHEMA)
                    else:  # an empty block is one batch with no rows
                        batch = pa.record_batch([pa.array([], pa.int64()), pa.array([], pa.binary())],
                                                schema=BLOCK_SCHEMA)
                    if i == 0:
                        writer.write_with_metadata(batch, header)
                    else:
                        writer.write_batch(batch)
            writer.done_writing()
            for _ in blocks:
                buf = reader.read()
                if buf is None:
                    break
                results.append(json.loads(buf.to_pybytes())["status"])
        finally:
            writer.close()  # raises the server's error, if the call failed
        return results

    def get(self, name: str) -> Block:
        """Read one block by name (its SHA-256 checked)."""
        with translated(self._timeout):
            for frame in _frames(self._do_get({"block": name})):
                if isinstance(frame, Block):
                    return frame
        raise PlumbError(f"block {name}: the server sent no block")

    def queues(self) -> List[Dict[str, Any]]:
        """Every queue the caller may read: name, blocks, bytes and consumer groups."""
        with translated(self._timeout):
            return self._failover(lambda: [json.loads(f.app_metadata) for f in self._fc.list_flights(options=self._opts)])

    def blocks(self, queue: str) -> List[Dict[str, Any]]:
        """A queue's blocks in arrival order: name, site, seq, time, size, sha256, arrived."""
        out: List[Dict[str, Any]] = []
        after = 0
        while True:
            page = self.action("list-blocks", {"queue": queue, "after": after, "limit": 1000})
            out += page
            if len(page) < 1000:
                return out
            after = page[-1]["serial"]

    def _queue_known(self, queue: str) -> None:
        """Raise NotFound for a queue the server does not have: a read of a
        misspelt queue must not look like an empty one."""
        self.action("list-blocks", {"queue": queue, "limit": 1})

    def ack(self, queue: str, group: str, *names: str) -> int:
        """Acknowledge blocks for a consumer group (any number in one call);
        how many were owed."""
        if not names:
            return 0
        return self.action("ack", {"queue": queue, "group": group, "blocks": list(names)})[0]["acked"]

    def nack(self, queue: str, group: str, *names: str, reader: Optional[str] = None) -> int:
        """Give blocks a reader of the group holds but could not finish back
        to the group at once, for any of its readers to take next (the
        attempt stays counted), instead of after the visibility timeout;
        how many were held. reader, the name a read gave in its ticket,
        also gives back every block that read holds unacked, those the
        server sent ahead included."""
        if not names and reader is None:
            return 0
        body: Dict[str, Any] = {"queue": queue, "group": group, "blocks": list(names)}
        if reader is not None:
            body["reader"] = reader
        return self.action("nack", body)[0]["released"]

    def consume(self, queue: str, group: str, start: Union[str, _dt.datetime, None] = None, follow: bool = False,
                visibility: Optional[float] = None, ack: str = "auto", ack_every: int = 100,
                ack_interval: float = 1.0, spool: Optional[Union[str, "os.PathLike[str]"]] = None,
                idle_timeout: Optional[float] = None, _on_reader: Any = None) -> Iterator[Block]:
        """A consumer group's blocks.

        start is where a new group begins: "latest" (the server's default,
        as for the CLI and the Go client), "earliest", or a time (a
        timezone-aware datetime, or an RFC 3339 string): the blocks kept
        whose event time is at or after it, and every block that arrives
        after, as Kafka's offsets_for_times starts a consumer; a group that
        exists goes on where it stands. With ack="auto" a block is done once
        the loop asks for the next one, and done blocks are acknowledged
        together, every ack_every blocks or ack_interval seconds (one round
        trip each was most of the time of a loop over small blocks) and
        when the loop ends; a block the caller did not finish (an exception,
        a break) stays owed, and it and the blocks read ahead go back to the
        group when the loop ends, as a Kafka consumer's do on close (a
        reader that dies instead gives them back after the visibility
        timeout: seconds, the server's default when None). With
        ack="manual" nothing is acknowledged here: call ack() with the
        names, one or many at a time.

        spool, a directory, writes each block there as it comes (its file
        is Block.path, data is empty; the file is the caller's to move or
        delete): a 256 MiB block then costs a chunk of memory, not twice
        its size. idle_timeout (seconds) ends a follow=True loop once no
        block came for that long, as a poll with a timeout does.
        """
        if ack not in ("auto", "manual"):
            raise InvalidArgument(f"ack={ack!r}: want 'auto' or 'manual'")
        if spool is not None:
            spool = os.fspath(spool)
            if not os.path.isdir(spool):
                raise InvalidArgument(f"spool={spool!r}: not a directory")
        if idle_timeout is not None and idle_timeout <= 0:
            raise InvalidArgument(f"idle_timeout={idle_timeout!r}: want seconds above 0")
        if not follow:
            self._queue_known(queue)
        # The read is named, so that a loop that ends early gives back
        # what the server sent ahead even when it had finished sending.
        rid = uuid.uuid4().hex
        t: Dict[str, Any] = {"queue": queue, "group": group, "follow": follow, "reader": rid}
        if start is not None:
            t["from"] = _start(start)
        if visibility is not None:
            t["visibility"] = visibility
        started = time.monotonic()
        reader = self._do_get(t)
        if _on_reader is not None:
            _on_reader(reader)
        done: List[str] = []
        current: Optional[str] = None  # handed to the loop, not finished
        last = time.monotonic()
        idle = _Idle(reader, idle_timeout)
        try:
            with idle.ends(), translated(self._timeout, started):
                for frame in _frames(reader, spool):
                    idle.stop()
                    if not isinstance(frame, Block):
                        idle.start()
                        continue
                    current = frame.name if ack == "auto" else None
                    yield frame
                    current = None
                    idle.start()
                    if ack == "manual":
                        continue
                    done.append(frame.name)
                    if len(done) >= max(ack_every, 1) or time.monotonic() - last >= ack_interval:
                        self.ack(queue, group, *done)
                        done.clear()
                        last = time.monotonic()
        finally:
            idle.stop()
            try:
                if done:
                    # Those the loop finished before it ended (normally,
                    # by a break or by an exception in a later block),
                    # acked before the read ends: the server gives every
                    # block the reader holds unacked back to the group
                    # when it goes away.
                    with translated(self._timeout):
                        self.ack(queue, group, *done)
            finally:
                reader.cancel()
            if current is not None:
                # The block the loop left (a break, an exception) and those
                # read ahead are given back before this returns, so the
                # next read has them. A nack that fails changes nothing the
                # caller must know: they come back after the visibility
                # timeout.
                try:
                    with translated(self._timeout):
                        self.nack(queue, group, current, reader=rid)
                except (PlumbError, fl.FlightError):
                    pass

    async def consume_async(self, queue: str, group: str, **kw: Any) -> AsyncIterator[Block]:
        """consume() for asyncio: `async for block in c.consume_async(...)`,
        with the same arguments. The blocking reads run on a thread of the
        loop's executor, so the event loop goes on meanwhile; cancelling
        the task (asyncio.wait_for, TaskGroup) cancels the read, and the
        blocks finished before are acknowledged as when a loop ends."""
        loop = asyncio.get_running_loop()
        readers: List[fl.FlightStreamReader] = []
        gen = self.consume(queue, group, _on_reader=readers.append, **kw)
        end = object()
        pending = None
        try:
            while True:
                pending = loop.run_in_executor(None, next, gen, end)
                block = await asyncio.shield(pending)
                pending = None
                if block is end:
                    return
                yield block
        finally:
            if pending is not None:
                # Cancelled while a read waits: end the read, let the
                # thread's next() return, then close the generator there.
                for r in readers:
                    r.cancel()
                try:
                    await pending
                except Exception:
                    pass
            await loop.run_in_executor(None, gen.close)

    def groups(self, queue: str) -> List[Dict[str, Any]]:
        """A queue's consumer groups (a non-admin sees their own)."""
        return self.action("group-list", {"queue": queue})

    def delete_group(self, queue: str, group: str) -> None:
        """Delete a consumer group, releasing the blocks it held."""
        self.action("group-delete", {"queue": queue, "group": group})

    # Records, windows and streams.

    def records(self, queue: str, columns: Optional[Sequence[str]] = None, where: Optional[Where] = None,
                since: Union[str, int, _dt.datetime, None] = None, until: Union[str, int, _dt.datetime, None] = None,
                instance: Optional[str] = None, limit: Optional[int] = None) -> pa.Table:
        """Rows of a queue of Arrow blocks (such as dns.arrow) as one table.

        where is {column: value} for equality, or [(column, op, value)] with
        op one of = != < <= > >=; since and until are times (datetime or
        RFC 3339) or sequence numbers, both ends included; limit ends the
        table after that many rows. records_reader() streams the same.
        """
        reader = self.records_reader(queue, columns, where, since, until, instance, limit)
        with translated(self._timeout):
            return reader.read_all()

    def records_reader(self, queue: str, columns: Optional[Sequence[str]] = None, where: Optional[Where] = None,
                       since: Union[str, int, _dt.datetime, None] = None,
                       until: Union[str, int, _dt.datetime, None] = None,
                       instance: Optional[str] = None, limit: Optional[int] = None) -> pa.RecordBatchReader:
        """The rows records() reads, as a pyarrow.RecordBatchReader that
        yields batches as the server sends them: DuckDB
        (duckdb.from_arrow(reader)) and polars (pl.from_arrow(reader))
        read it without the whole table in memory. Arguments as records().
        """
        t: Dict[str, Any] = {"records": queue}
        if instance:
            t["instance"] = instance
        if columns:
            t["columns"] = list(columns)
        if where:
            items = where.items() if isinstance(where, Mapping) else where
            t["filter"] = [{"column": c, "op": op, "value": v} for c, op, v in
                           (((k, "=", v) for k, v in items) if isinstance(where, Mapping) else items)]
        for key, v in (("from", since), ("to", until)):
            if isinstance(v, _dt.datetime):
                if v.tzinfo is None:
                    raise InvalidArgument(f"{key} {v}: give a timezone (UTC, say)")
                v = v.isoformat()
            if v is not None:
                t[key] = v
        if limit is not None:
            if limit < 1:
                raise InvalidArgument(f"limit {limit}: give at least 1 row")
            t["limit"] = limit
        started = time.monotonic()
        reader = self._do_get(t)
        with translated(self._timeout, started):
            schema = reader.schema

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                with translated(self._timeout, started):
                    for chunk in reader:
                        yield chunk.data
            finally:
                reader.cancel()

        return pa.RecordBatchReader.from_batches(schema, batches())

    def windows(self, queue: str, group: str, spec: Mapping[str, Any], follow: bool = False,
                start: Optional[str] = None, idle_timeout: Optional[float] = None) -> Iterator[Window]:
        """A queue's complete windows, each once for the group, with its blocks.

        spec is a window as a job declares it ({"size": "24h"}, {"size": "12",
        "max_wait": "1h"}, ...). A window's blocks are acknowledged when the
        loop asks for the next window. idle_timeout (seconds) ends the loop
        once no window came for that long: a finished capture's last
        window may wait for blocks that never come, and follow=True never
        ends by itself.
        """
        if idle_timeout is not None and idle_timeout <= 0:
            raise InvalidArgument(f"idle_timeout={idle_timeout!r}: want seconds above 0")
        if not follow:
            self._queue_known(queue)
        t: Dict[str, Any] = {"window": queue, "spec": dict(spec), "group": group, "follow": follow}
        if start:
            t["from"] = start
        started = time.monotonic()
        reader = self._do_get(t)
        idle = _Idle(reader, idle_timeout)
        try:
            with idle.ends(), translated(self._timeout, started):
                frames = _frames(reader)
                for frame in frames:
                    idle.stop()
                    if isinstance(frame, Block) or "window" not in frame:
                        raise PlumbError(f"protocol error: window stream sent {frame!r} before a window header")
                    w, blocks = frame["window"], []
                    for _ in range(frame.get("blocks", 0)):
                        b = next(frames)
                        if not isinstance(b, Block):
                            raise PlumbError(f"window {w['id']}: expected a block, got {b!r}")
                        blocks.append(b)
                    yield Window(id=w["id"], instance=frame.get("instance", ""), present=frame.get("present") or [],
                                 missing=frame.get("missing") or [], late=frame.get("late") or [],
                                 revision=w.get("revision", 0), reason=w.get("reason", ""),
                                 start=w.get("from"), end=w.get("to"), blocks=blocks, empty=frame.get("empty", 0))
                    if blocks:
                        self.ack(queue, group, *(b.name for b in blocks))
                    idle.start()
        finally:
            idle.stop()
            reader.cancel()

    def stream(self, queue: str, instance: str, consumer: str, start: str = "checkpoint", follow: bool = False,
               gap_wait: Optional[str] = None, gap_then: str = "skip") -> "Stream":
        """One site's blocks in sequence order, with a cursor and state kept on the server."""
        return Stream(self, queue, instance, consumer, start, follow, gap_wait, gap_then)

    def delete_consumer(self, queue: str, instance: str, consumer: str) -> None:
        """Delete a stream consumer, releasing the blocks its cursor held."""
        self.action("delete-state", {"queue": queue, "instance": instance, "consumer": consumer})

    # Pipelines.

    def submit_job(self, yaml_text: str, file: str = "") -> Dict[str, Any]:
        """Submit a job; the answer says it was accepted, the stages it owns
        and any warnings. A job the server rejects raises JobRejected, whose
        str() is why (every problem, with file:line:column) and whose
        result is the whole answer."""
        res = self.action("submit-job", {"file": file, "yaml": yaml_text})[0]
        if res.get("state") == "rejected":
            raise JobRejected(res.get("reason") or "the job was rejected", res)
        return res

    def jobs(self) -> List[Dict[str, Any]]:
        return self.action("list-jobs")

    def stats(self) -> List[Dict[str, Any]]:
        """Every stage's measurements: runs, bytes, CPU seconds, backlog."""
        return self.action("stats")

    def status(self) -> List[Dict[str, Any]]:
        """How far behind each stage, group and stream consumer is."""
        return self.action("status")


class Stream:
    """One site's blocks in order (iterate it), with its consumer's state.

    The server keeps the cursor: a stream opened again goes on from the
    last checkpoint (or from start="earliest" or a sequence number).
    """

    def __init__(self, c: Client, queue: str, instance: str, consumer: str, start: str, follow: bool,
                 gap_wait: Optional[str], gap_then: str):
        self._c = c
        self._req = {"queue": queue, "instance": instance, "consumer": consumer}
        t: Dict[str, Any] = {"stream": queue, "instance": instance, "consumer": consumer, "follow": follow,
                             "from": start}
        if gap_wait:
            t["gap"] = {"wait": gap_wait, "then": gap_then}
        if not follow:
            c._queue_known(queue)
            try:
                found = c.action("last-seq", {"queue": queue, "instance": instance})[0].get("found", True)
            except PermissionDenied:
                found = True  # last-seq is an agent's call: the site is not checked
            if not found:
                raise NotFound(f"queue {queue} has no site {instance}")
        self._started = time.monotonic()
        self._reader = c._do_get(t)
        self.events: List[Event] = []

    def __iter__(self) -> Iterator[Block]:
        with translated(self._c._timeout, self._started):
            for frame in _frames(self._reader):
                if isinstance(frame, Block):
                    yield frame
                else:
                    self.events.append(Event(event=frame.get("event", ""), next=frame.get("next", 0),
                                             missing=frame.get("missing", 0), late=frame.get("late") or []))

    def state(self) -> Dict[str, Any]:
        """The cursor: next sequence number, state, checkpoint, skipped and late blocks."""
        return self._c.action("get-state", self._req)[0]

    def checkpoint(self, state: Optional[Mapping[str, str]] = None) -> None:
        """Save the cursor and state together; a restarted stream resumes here."""
        body = dict(self._req)
        if state is not None:
            body["state"] = dict(state)
        self._c.action("checkpoint", body)

    def close(self) -> None:
        self._reader.cancel()

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


DEFAULT_RECEIVE_WINDOW = 4 << 20
"""connect()'s receive_window: a stream reads at most this far ahead."""


def connect(addr: Optional[str] = None, user: Optional[str] = None, secret: Optional[str] = None,
            token_file: Optional[str] = None, tls_ca: Optional[str] = None, timeout: Optional[float] = None,
            tls: bool = False, cert: Optional[str] = None, key: Optional[str] = None,
            receive_window: Optional[int] = DEFAULT_RECEIVE_WINDOW, spread: bool = True) -> Client:
    """Connect to a server at HOST:PORT (or a grpc:// / grpc+tls:// URI).

    addr may name several servers sharing their metadata, comma-separated
    ("a:8815,b:8815"), or be one DNS name with several addresses: the
    client talks to one (a random one unless spread=False), and when a call
    finds it unavailable moves to the next and makes the call again there.
    A stream under way when its server dies raises Unavailable.

    As the CLI and the Go client do, what is not given comes from the
    environment: PLUMB_SERVER (else 127.0.0.1:8815), PLUMB_USER and
    PLUMB_SECRET, PLUMB_TOKEN_FILE, PLUMB_TLS_CA. user and secret log in
    with a Basic handshake; token_file holds a token or API key instead.
    tls_ca is a PEM file of the roots to trust (it turns TLS on, as tls=True
    does with the system's roots); cert and key are a PEM client
    certificate and its key, for a server that wants mutual TLS. timeout
    (seconds) bounds each call, raising Timeout.

    receive_window (bytes, 4 MiB) is how far gRPC may read a stream ahead
    of the program: it bounds the memory a large block takes while it is
    read (with spool=, about three windows over what the process held),
    and a stream's speed to a window per round trip (4 MiB: 40 MiB/s at
    100 ms). Raise it for a long fat link; None lets gRPC widen it as it
    probes the link, which took up to 66 MiB reading a 256 MiB block.
    """
    addr = addr or os.environ.get("PLUMB_SERVER") or "127.0.0.1:8815"
    user = user if user is not None else os.environ.get("PLUMB_USER") or None
    if user is not None and secret is None:
        secret = os.environ.get("PLUMB_SECRET")
    token_file = token_file or os.environ.get("PLUMB_TOKEN_FILE") or None
    tls_ca = tls_ca or os.environ.get("PLUMB_TLS_CA") or None
    if (cert is None) != (key is None):
        raise InvalidArgument("a client certificate needs both cert= and key=")
    servers = [a.strip() for a in addr.split(",") if a.strip()]
    if not servers:
        raise InvalidArgument(f"server {addr!r}: want HOST:PORT, or several comma-separated")
    if spread:
        random.shuffle(servers)
    kw: Dict[str, Any] = {}
    if receive_window is not None:
        if receive_window < 65536:
            raise InvalidArgument(f"receive_window {receive_window}: give at least 65536 bytes")
        kw["generic_options"] = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", int(receive_window))]
    if tls_ca:
        with open(tls_ca, "rb") as f:
            kw["tls_root_certs"] = f.read()
    if cert is not None and key is not None:
        with open(cert, "rb") as f:
            kw["cert_chain"] = f.read()
        with open(key, "rb") as f:
            kw["private_key"] = f.read()
    if user is not None and secret is None:
        raise InvalidArgument(f"user {user}: give the secret too (secret=, or PLUMB_SECRET)")

    def open_server(i: int) -> Tuple[fl.FlightClient, fl.FlightCallOptions]:
        one = servers[i]
        if "://" in one:
            location = one
        else:
            location = ("grpc+tls://" if tls_ca or tls or cert else "grpc://") + one
        fc = fl.FlightClient(location, **kw)
        headers: List[Tuple[bytes, bytes]] = []
        if user is not None:
            headers.append(fc.authenticate_basic_token(user, secret))
        elif token_file:
            with open(token_file) as f:
                headers.append((b"authorization", b"Bearer " + f.read().strip().encode()))
        return fc, fl.FlightCallOptions(headers=headers, timeout=timeout)

    with translated():
        fc, opts = open_server(0)
    if len(servers) == 1:
        return Client(fc, opts, timeout)
    return Client(fc, opts, timeout, _open=open_server, _servers=len(servers))
