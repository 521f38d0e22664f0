"""A stateful consumer with nothing but pyarrow: the stream actions move a
server-side cursor through one site's blocks in order, and the stream
ticket pushes them with gap events between."""
import json

import pyarrow.flight as fl

from conftest import put_blocks, read_blocks


def name(seq):
    return f"20250505-0000{seq:02d}-{seq:08d}.lax.raw"


def act(c, action, **body):
    body = {"queue": "raw", "instance": "lax", "consumer": "zeekish", **body}
    return [json.loads(r.body.to_pybytes()) for r in c.do_action(fl.Action(action, json.dumps(body).encode()))]


def test_actions_and_checkpoints(server):
    c = server.client()
    put_blocks(c, "raw", "lax", [(name(2), b"two"), (name(1), b"one"), (name(4), b"four")])
    [p] = act(c, "peek-next")
    assert p["next"] == 1 and p["present"] and p["gap"] == 1
    for seq, want in [(1, b"one"), (2, b"two")]:
        [nxt] = act(c, "process-next")
        assert nxt["seq"] == seq
        [(hdr, data)] = read_blocks(c.do_get(fl.Ticket(json.dumps(nxt["ticket"]).encode())))
        assert bytes(data) == want
        act(c, "commit", seq=seq)
        act(c, "put-state", state={"bytes": str(seq * 3)})
    act(c, "checkpoint")
    [p] = act(c, "peek-next")
    assert p["next"] == 3 and not p["present"] and p["gap"] == 2
    act(c, "skip")
    [cur] = act(c, "get-state")
    assert cur["next"] == 4 and cur["skipped"] == [3] and cur["state"] == {"bytes": "6"}
    assert cur["checkpoint"]["next"] == 3
    [listed] = [json.loads(r.body.to_pybytes()) for r in c.do_action(fl.Action("list-state", b'{"queue": "raw"}'))]
    assert listed["consumer"] == "zeekish"


def test_stream_ticket_pushes_in_order_with_gap_events(server):
    c = server.client()
    put_blocks(c, "raw", "lax", [(name(3), b"three"), (name(1), b"one")])  # 2 withheld
    ticket = {"stream": "raw", "instance": "lax", "consumer": "ids", "from": "earliest",
              "gap": {"wait": "200ms", "then": "skip"}}
    reader = c.do_get(fl.Ticket(json.dumps(ticket).encode()))
    events, blocks = [], []
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        meta = json.loads(chunk.app_metadata.to_pybytes()) if chunk.app_metadata is not None else None
        if meta and "event" in meta:
            events.append(meta)
        elif meta:
            blocks.append(meta["name"])
    assert blocks == [name(1), name(3)]
    assert [e["event"] for e in events] == ["gap", "skipped"] and events[0]["next"] == 2
