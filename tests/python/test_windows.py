"""A consumer outside the pipelines reads complete windows with pyarrow:
each window is a zero-row batch with the window's JSON, then its blocks."""
import json

import pyarrow.flight as fl

from conftest import put_blocks


def name(seq, minute):
    return f"20250505-{minute // 60:02d}{minute % 60:02d}00-{seq:08d}.lax.raw"


def read_windows(reader):
    """[(header, [(block header, bytes)])] from a window stream."""
    windows = []
    cur = None
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        meta = json.loads(chunk.app_metadata.to_pybytes()) if chunk.app_metadata is not None else None
        if meta is not None and "window" in meta:
            windows.append((meta, []))
            continue
        if meta is not None:
            cur = [meta, bytearray()]
            windows[-1][1].append(cur)
        if chunk.data is not None and chunk.data.num_rows:
            for data in chunk.data.column("data").to_pylist():
                cur[1].extend(data)
    return windows


def test_window_ticket_streams_complete_hours(server):
    c = server.client()
    # Hour 0 holds 1,2,3; block 4 at 01:00 brackets it. Hour 1 is not
    # bracketed yet.
    put_blocks(c, "raw", "lax", [(name(1, 0), b"one"), (name(2, 20), b"two"), (name(3, 40), b"three"), (name(4, 60), b"four")])
    ticket = {"window": "raw", "spec": {"size": "1h"}, "group": "hourly"}
    [(hdr, blocks)] = read_windows(c.do_get(fl.Ticket(json.dumps(ticket).encode())))
    assert hdr["window"]["from"] == "2025-05-05T00:00:00Z" and hdr["window"]["reason"] == "complete"
    assert hdr["instance"] == "lax" and hdr["present"] == [1, 2, 3] and hdr["missing"] == [] and hdr["blocks"] == 3
    assert [bytes(b) for _, b in blocks] == [b"one", b"two", b"three"]

    # The group got that window; the next read gets only new ones.
    assert read_windows(c.do_get(fl.Ticket(json.dumps(ticket).encode()))) == []
    put_blocks(c, "raw", "lax", [(name(6, 125), b"six")])  # 5 is missing
    ticket["spec"]["max_missing"] = "1"
    [(hdr, blocks)] = read_windows(c.do_get(fl.Ticket(json.dumps(ticket).encode())))
    assert hdr["window"]["from"] == "2025-05-05T01:00:00Z" and hdr["missing"] == [5] and hdr["present"] == [4]
    assert hdr["window"]["reason"] == "max_missing"


def test_window_ticket_errors(server):
    c = server.client()
    for ticket, want in [({"window": "raw", "spec": {"size": "1h"}}, "consumer group"),
                         ({"window": "raw", "spec": {"size": "soon"}, "group": "g"}, "window.size")]:
        try:
            c.do_get(fl.Ticket(json.dumps(ticket).encode())).read_all()
            raise AssertionError(f"{ticket} accepted")
        except fl.FlightError as e:
            assert want in str(e), str(e)
        except Exception as e:  # pyarrow maps InvalidArgument to ArrowInvalid
            assert want in str(e), str(e)
