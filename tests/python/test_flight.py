"""pyarrow.flight against a real plumb server, as a Python user would use it."""
import hashlib
import json
import threading

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from conftest import TESTDATA, put_blocks, read_blocks

CAPTURES = sorted((TESTDATA / "pcaps").glob("*.pcap"))


def name(seq, queue="pcap"):
    return f"20250505-151105-{seq:08d}.lax.{queue}"


def ticket(**kw):
    return fl.Ticket(json.dumps(kw).encode())


def action(client, typ, **body):
    return [json.loads(r.body.to_pybytes()) for r in client.do_action(fl.Action(typ, json.dumps(body).encode()))]


def test_put_list_info_get(server):
    client = server.client()
    files = CAPTURES[:5]
    blocks = [(name(i + 1), f.read_bytes()) for i, f in enumerate(files)]
    big = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MiB: several batches
    blocks.append((name(len(blocks) + 1), big))
    results = put_blocks(client, "pcap", "lax", blocks)
    assert [r["status"] for r in results] == ["stored"] * len(blocks)
    assert [r["name"] for r in results] == [n for n, _ in blocks]

    flights = list(client.list_flights())
    assert [f.descriptor.path for f in flights] == [[b"pcap"]]
    info = client.get_flight_info(fl.FlightDescriptor.for_path("pcap"))
    assert info.total_bytes == sum(len(d) for _, d in blocks)
    assert json.loads(info.app_metadata)["blocks"] == len(blocks)
    assert info.schema.names == ["offset", "data"]

    for n, data in blocks:
        got = read_blocks(client.do_get(ticket(block=n)))
        assert len(got) == 1
        header, body = got[0]
        assert header["name"] == n
        assert hashlib.sha256(body).hexdigest() == hashlib.sha256(data).hexdigest() == header["sha256"]

    # The flight's own endpoint ticket reads the whole queue.
    got = read_blocks(client.do_get(info.endpoints[0].ticket))
    assert [h["name"] for h, _ in got] == [n for n, _ in blocks]


def test_header_as_metadata_message_and_duplicates(server):
    client = server.client()
    data = (TESTDATA / "pcaps" / "dnscap__dns.pcap").read_bytes()
    assert put_blocks(client, "pcap", "lax", [(name(1), data), (name(2), b"")], header_as_message=True) == [
        {"name": name(1), "status": "stored"}, {"name": name(2), "status": "stored"}]
    assert put_blocks(client, "pcap", "lax", [(name(1), data)])[0]["status"] == "duplicate"
    with pytest.raises(pa.ArrowException, match="already stored with sha256"):
        put_blocks(client, "pcap", "lax", [(name(1), data + b"x")])
    header, body = read_blocks(client.do_get(ticket(block=name(2))))[0]
    assert header["size"] == 0 and body == b""


def test_bad_tickets(server):
    client = server.client()
    for raw, says in [(b"{nope", "not valid JSON"), (b'{"blok": 1}', "unknown field"),
                      (b'{"block": "../x"}', "invalid name")]:
        with pytest.raises(pa.ArrowException, match=says):
            client.do_get(fl.Ticket(raw)).read_all()
    with pytest.raises(pa.ArrowException, match="not stored"):
        client.do_get(ticket(block=name(42))).read_all()


def test_follow_with_acks(server):
    client = server.client()
    reader = client.do_get(ticket(queue="pcap", group="py", follow=True, **{"from": "earliest"}))
    got = []

    def consume():
        for header, body in read_blocks(reader, limit=4):
            assert hashlib.sha256(body).hexdigest() == header["sha256"]
            got.append(header["name"])
            assert action(client, "ack", queue="pcap", group="py", blocks=[header["name"]]) == [{"acked": 1}]

    t = threading.Thread(target=consume)
    t.start()
    for i in range(4):  # blocks arrive while the reader follows
        put_blocks(client, "pcap", "lax", [(name(i + 1), CAPTURES[i].read_bytes())])
    t.join(timeout=30)
    assert not t.is_alive(), "follower did not receive 4 blocks"
    reader.cancel()
    assert got == [name(i + 1) for i in range(4)]
    stats = action(client, "queue-stats", queue="pcap")[0]
    counts = [{k: g[k] for k in ("group", "unreserved", "reserved", "done", "faulty")} for g in stats["groups"]]
    assert counts == [{"group": "py", "unreserved": 0, "reserved": 0, "done": 4, "faulty": 0}]
    assert stats["groups"][0]["used"] >= stats["groups"][0]["created"]  # when it was last read, for its idle expiry


def test_two_clients_share_a_group(server):
    client = server.client()
    blocks = [(name(i + 1), CAPTURES[i].read_bytes()) for i in range(10)]
    put_blocks(client, "pcap", "lax", blocks)
    seen = {0: [], 1: []}
    errors = []

    def consume(k):
        try:
            c = server.client()
            r = c.do_get(ticket(queue="pcap", group="shared", follow=False, **{"from": "earliest"}))
            for header, body in read_blocks(r):
                assert hashlib.sha256(body).hexdigest() == header["sha256"]
                seen[k].append(header["name"])
                action(c, "ack", queue="pcap", group="shared", blocks=[header["name"]])
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=consume, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    together = seen[0] + seen[1]
    assert sorted(together) == sorted(n for n, _ in blocks), "each block goes to exactly one member"
    # Another group still sees every block.
    other = read_blocks(client.do_get(ticket(queue="pcap", group="other", **{"from": "earliest"})))
    assert [h["name"] for h, _ in other] == [n for n, _ in blocks]


def test_list_actions(server):
    types = {a.type: a.description for a in server.client().list_actions()}
    assert {"ack", "queue-stats", "list-blocks"} <= set(types)
    assert all(types.values())
