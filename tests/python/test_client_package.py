"""The Python package (clients/python) against real servers, as a user
would install and use it: the wheel is built with `pip wheel`, installed
into a directory of its own, and imported from there."""
import asyncio
import datetime as dt
import hashlib
import io
import os
import time
import json
import subprocess
import sys
import zipfile

import pyarrow as pa
import pytest
import yaml

from conftest import ROOT, TESTDATA, Server

CAPTURES = sorted((TESTDATA / "pcaps").glob("*.pcap"))


@pytest.fixture(scope="session")
def plumb(tmp_path_factory):
    """The package, from the wheel `pip wheel` builds."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(ROOT / "clients" / "python")], check=True)
    wheels = list(out.glob("plumb_client-*.whl"))
    assert len(wheels) == 1, wheels
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "plumb_client/__init__.py" in names and "plumb_client/py.typed" in names, names
    # Not `plumb`: that name on PyPI is another project's.
    assert not any(n.startswith("plumb/") for n in names), names
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(wheels[0])], check=True)
    sys.path.insert(0, str(target))
    import plumb_client as pkg
    assert pkg.__file__.startswith(str(target)), pkg.__file__
    return pkg


def name(seq, site="lax", queue="pcap.sz", day=5):
    return f"202505{day:02d}-151105-{seq:08d}.{site}.{queue}"


def names_file():
    t0 = dt.datetime(2025, 5, 5, 15, 11, 5, tzinfo=dt.timezone.utc)
    table = pa.table({
        "time": pa.array([t0, t0 + dt.timedelta(seconds=1), t0 + dt.timedelta(hours=2)], pa.timestamp("ns", "UTC")),
        "qname": ["www.example.", "nope.example.", "late.example."],
        "rcode": pa.array([0, 3, 3], pa.int64()),
    })
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def test_connect_moves_past_a_dead_server(plumb, server):
    """Given several servers, the client moves on from one that does not
    answer and makes the call again on the next; given that one alone, the
    call fails as Unavailable."""
    from conftest import free_port
    dead = f"127.0.0.1:{free_port()}"
    with plumb.connect(f"{dead},{server.addr}", spread=False, timeout=10) as c:
        assert c.put(name(1), b"first") == "stored"
        assert c.get(name(1)).data == b"first"
        assert [q["queue"] for q in c.queues()] == ["pcap.sz"]
        assert c.put(name(1), b"first") == "duplicate"
    with plumb.connect(dead, timeout=5) as c:
        with pytest.raises(plumb.Unavailable):
            c.queues()


def test_blocks_and_groups(plumb, server):
    c = plumb.connect(server.addr)
    blocks = [(name(i + 1), CAPTURES[i].read_bytes()) for i in range(3)]
    big = bytes(range(256)) * 9000  # 2.3 MB: several batches each way
    blocks.append((name(4), big))
    blocks.append((name(1, site="ams"), b""))
    assert c.put_many(blocks) == ["stored"] * 5
    assert c.put(name(2), CAPTURES[1]) == "duplicate"  # a path works too
    got = c.get(name(4))
    assert (got.name, got.data, got.seq, got.instance, got.queue) == (name(4), big, 4, "lax", "pcap.sz")
    assert got.time == dt.datetime(2025, 5, 5, 15, 11, 5, tzinfo=dt.timezone.utc)
    assert c.get(name(1, site="ams")).data == b""

    [q] = c.queues()
    assert (q["queue"], q["blocks"], q["bytes"]) == ("pcap.sz", 5, sum(len(d) for _, d in blocks))
    assert [b["name"] for b in c.blocks("pcap.sz")] == [n for n, _ in blocks]

    # A block the loop did not finish stays owed; the others are acked.
    seen = []
    for b in c.consume("pcap.sz", group="archive", start="earliest", visibility=1):
        seen.append(b.name)
        if len(seen) == 3:
            break  # the third is not acknowledged
    assert seen == [n for n, _ in blocks[:3]]
    [g] = c.groups("pcap.sz")
    assert (g["group"], g["done"]) == ("archive", 2)
    # The unfinished block (and any the server had sent ahead) comes again
    # once its visibility timeout has passed.
    time.sleep(1.2)
    again = sorted(b.name for b in c.consume("pcap.sz", group="archive", start="earliest", visibility=1))
    assert again == sorted([name(3), name(4), name(1, site="ams")])
    assert c.groups("pcap.sz")[0]["done"] == 5
    c.delete_group("pcap.sz", "archive")
    assert c.groups("pcap.sz") == []


def test_consume_acks_in_batches(plumb, server):
    """One ack round trip per block was most of a loop's time over small
    blocks: done blocks are acknowledged together, by count, by time and
    at the loop's end; ack="manual" leaves it to the caller, in any number
    at once. A new group starts where the server says (latest), as for the
    CLI and the Go client."""
    c = plumb.connect(server.addr)
    c.put_many([(name(i), b"x") for i in range(1, 251)])
    assert list(c.consume("pcap.sz", group="late")) == []  # from latest: none of these
    acks = []
    action = c.action
    c.action = lambda typ, body=None: (acks.append(len(body["blocks"])) if typ == "ack" else None) or action(typ, body)
    got = [b.name for b in c.consume("pcap.sz", group="batched", start="earliest", ack_every=100, ack_interval=3600)]
    assert len(got) == 250 and acks == [100, 100, 50], acks
    assert c.groups("pcap.sz")[[g["group"] for g in c.groups("pcap.sz")].index("batched")]["done"] == 250

    acks.clear()
    manual = [b.name for b in c.consume("pcap.sz", group="manual", start="earliest", ack="manual")]
    assert len(manual) == 250 and acks == []
    assert c.ack("pcap.sz", "manual", *manual) == 250 and acks == [250]
    with pytest.raises(plumb.InvalidArgument, match="want 'auto' or 'manual'"):
        list(c.consume("pcap.sz", group="x", ack="sometimes"))


# The reader's peak memory is the kernel's high-water mark of its address
# space (VmHWM; ru_maxrss would carry the forking parent's over execve).
SPOOL_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import plumb_client
def peak():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
c = plumb_client.connect(sys.argv[2])
c.queues()
before = peak()
blocks = list(c.consume("pcap.sz", "big", start="earliest", spool=sys.argv[3]))
print(len(blocks), blocks[0].path, blocks[0].sha256, before, peak())
"""


def test_break_gives_blocks_back(plumb, server):
    """A loop that breaks gives the block it was on back to the group at
    once, and those read ahead with it, even when the server had finished
    sending them all (a read without follow ends before the loop does):
    the next read has them now, not after the visibility timeout (an hour
    here)."""
    c = plumb.connect(server.addr)
    c.put_many([(name(i), f"lax {i}".encode()) for i in range(1, 6)])
    for b in c.consume("pcap.sz", group="brk", start="earliest", visibility=3600):
        break
    again = [b.name for b in c.consume("pcap.sz", group="brk")]
    assert sorted(again) == sorted(name(i) for i in range(1, 6)), again


def test_nack(plumb, server):
    """A block a manual-ack loop nacks goes to the group's next reader at
    once, not after the visibility timeout (an hour here); what it acked
    stays done, and nack() answers how many were held."""
    c = plumb.connect(server.addr)
    c.put_many([(name(i), f"sea {i}".encode()) for i in range(1, 4)])
    held = [b.name for b in c.consume("pcap.sz", "nk", start="earliest", ack="manual", visibility=3600)]
    assert held == [name(i) for i in range(1, 4)], held
    assert c.ack("pcap.sz", "nk", held[0]) == 1
    assert c.nack("pcap.sz", "nk", held[0], held[2]) == 1
    assert [b.name for b in c.consume("pcap.sz", "nk", ack="manual")] == [held[2]]
    assert c.nack("pcap.sz", "nk") == 0
    with pytest.raises(plumb.NotFound):
        c.nack("pcap.sz", "nk", name(9))


def test_consume_spools_a_large_block(plumb, server, tmp_path):
    """A 256 MiB block (agents' default size) read with spool=DIR goes to
    a file as it comes: the reader's peak memory grows by less than 64 MiB,
    what gRPC's fixed receive window (connect's receive_window, 4 MiB) lets
    arrive ahead of the reader, not by the block (held whole, the block
    took about twice its size: 527 MiB; with gRPC widening the window as
    it probes the link, up to 67 MiB); and the file is the block, its
    SHA-256 checked."""
    big = tmp_path / "big"
    with open(big, "wb") as f:
        for i in range(256):
            f.write(hashlib.sha256(str(i).encode()).digest() * (1 << 15))  # 1 MiB each, not all alike
    c = plumb.connect(server.addr)
    c.put(name(1), big)
    spool = tmp_path / "spool"
    spool.mkdir()
    site = os.path.dirname(os.path.dirname(plumb.__file__))
    out = subprocess.run([sys.executable, "-c", SPOOL_SCRIPT, site, server.addr, str(spool)],
                         check=True, capture_output=True, text=True).stdout.split()
    n, path, sha, before, after = int(out[0]), out[1], out[2], int(out[3]), int(out[4])
    want = hashlib.sha256(big.read_bytes()).hexdigest()
    assert n == 1 and sha == want and hashlib.sha256(open(path, "rb").read()).hexdigest() == want
    assert os.listdir(spool) == [name(1)]
    grew_mib = (after - before) // 1024
    assert before > 0 and grew_mib < 64, f"reading a 256 MiB block to a file grew the reader's peak memory by {grew_mib} MiB"


def test_idle_timeout_ends_a_followed_loop(plumb, server):
    """A follow=True loop ends once no block came for idle_timeout, as a
    poll with a timeout does, acknowledging what it read."""
    c = plumb.connect(server.addr)
    c.put(name(1), b"one")
    started = time.monotonic()
    got = [b.name for b in c.consume("pcap.sz", "idle", start="earliest", follow=True, idle_timeout=1.0)]
    took = time.monotonic() - started
    assert got == [name(1)] and 0.9 < took < 30, (got, took)
    assert [g["done"] for g in c.groups("pcap.sz") if g["group"] == "idle"] == [1]
    with pytest.raises(plumb.InvalidArgument, match="idle_timeout"):
        list(c.consume("pcap.sz", "x", idle_timeout=0))
    with pytest.raises(plumb.InvalidArgument, match="not a directory"):
        list(c.consume("pcap.sz", "x", spool="/nonexistent/dir"))


def test_consume_async(plumb, server):
    """`async for` over consume_async(): the blocks in order, the event loop
    running meanwhile, and a followed loop cancelled (wait_for) ends its
    read and acknowledges what it read."""
    c = plumb.connect(server.addr)
    c.put_many([(name(i), b"x") for i in range(1, 4)])

    async def main():
        got = [b.name async for b in c.consume_async("pcap.sz", "aio", start="earliest")]
        seen, ticks = [], [0]

        async def follow():
            async for b in c.consume_async("pcap.sz", "aio-follow", start="earliest", follow=True):
                seen.append(b.name)

        async def ticker():
            while True:
                await asyncio.sleep(0.05)
                ticks[0] += 1

        t = asyncio.create_task(ticker())
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(follow(), 2)
        t.cancel()
        return got, seen, ticks[0]

    got, seen, ticks = asyncio.run(main())
    want = [name(i) for i in range(1, 4)]
    assert got == want and seen == want
    assert ticks >= 10, f"the event loop ticked {ticks} times in 2 s while a read waited"
    done = {g["group"]: g["done"] for g in c.groups("pcap.sz")}
    assert done["aio"] == 3 and done["aio-follow"] == 3, done


def test_every_status_has_its_class(plumb, server, tmp_path, monkeypatch):
    """pyarrow raises ArrowInvalid for most statuses and frames the message
    twice over; each status now has its class and the server's words
    alone."""
    c = plumb.connect(server.addr)
    c.put(name(1), b"one")
    cases = [
        (plumb.FailedPrecondition, "is already stored with sha256", lambda: c.put(name(1), b"two")),
        (plumb.ResourceExhausted, "more than the 65536 this action takes", lambda: c.action("list-blocks", {"queue": "a" * 100000})),
        (plumb.NotFound, "is not stored", lambda: c.get(name(9))),
        (plumb.InvalidArgument, "is not allowed", lambda: c.action("list-blocks", {"queue": "../x"})),
        (plumb.AlreadyExists, "", lambda: [c.action("store-add", {"name": "two", "url": str(tmp_path / "s")}) for _ in range(2)]),
        (plumb.Timeout, "", lambda: list(plumb.connect(server.addr, timeout=0.3).consume("pcap.sz", "t", follow=True))),
        (plumb.Unavailable, "", lambda: plumb.connect("127.0.0.1:1").queues()),
    ]
    for cls, says, call in cases:
        with pytest.raises(cls) as e:
            call()
        text = str(e.value)
        assert says in text and "gRPC returned" not in text and "Flight returned" not in text and "debug context" not in text, (cls, text)
    assert issubclass(plumb.Timeout, TimeoutError) and issubclass(plumb.NotFound, KeyError)

    # connect() reads the environment as the CLI does.
    monkeypatch.setenv("PLUMB_SERVER", server.addr)
    assert [q["queue"] for q in plumb.connect().queues()] == ["pcap.sz"]


def test_records_reader_streams(plumb, server):
    """records() read a whole table; records_reader() hands out batches as
    they come, for DuckDB or polars to read, and limit ends the rows."""
    c = plumb.connect(server.addr)
    for i in (1, 2, 3):
        c.put(name(i, queue="names.arrow"), names_file())
    r = c.records_reader("names.arrow", columns=["qname"])
    assert isinstance(r, pa.RecordBatchReader) and r.schema.names == ["qname"]
    assert sum(b.num_rows for b in r) == 9
    assert c.records("names.arrow", limit=4).num_rows == 4
    import duckdb
    import polars as pl
    reader = c.records_reader("names.arrow", where={"rcode": 3})
    assert duckdb.sql("select count(*) from reader").fetchall() == [(6,)]
    assert pl.from_arrow(c.records_reader("names.arrow", columns=["rcode"])).height == 9


def test_records_windows_and_streams(plumb, server):
    c = plumb.connect(server.addr)
    c.put(name(1, queue="names.arrow"), names_file())
    t = c.records("names.arrow", columns=["qname", "rcode"], where=[("rcode", "=", 3)],
                  until=dt.datetime(2025, 5, 5, 16, 0, tzinfo=dt.timezone.utc))
    assert t.column_names == ["qname", "rcode"]
    assert t.to_pylist() == [{"qname": "nope.example.", "rcode": 3}]
    assert c.records("names.arrow", where={"qname": "www.example."}).num_rows == 1
    assert list(c.records("names.arrow").to_pandas()["rcode"]) == [0, 3, 3]

    c.put_many([(name(i), f"lax {i}".encode()) for i in (1, 2, 4)])
    ws = list(c.windows("pcap.sz", group="pairs", spec={"size": "2", "max_missing": "1", "max_wait": "1ms"}))
    assert [(w.id, w.present, w.missing, [b.name for b in w.blocks]) for w in ws][0] == (
        "lax/0", [1, 2], [], [name(1), name(2)])
    # A followed read of a finished capture ends once no window comes for
    # idle_timeout, with the windows it gave.
    started = time.monotonic()
    ws = list(c.windows("pcap.sz", group="idle", spec={"size": "2"}, start="earliest", follow=True, idle_timeout=1.0))
    assert [w.id for w in ws] == ["lax/0"] and time.monotonic() - started < 30

    with c.stream("pcap.sz", "lax", consumer="ids") as s:
        for b in s:
            s.checkpoint({"last": str(b.seq)})
            if b.seq == 2:
                break
    st = s.state()
    assert st["checkpoint"]["state"] == {"last": "2"} and st["next"] == 3
    with c.stream("pcap.sz", "lax", consumer="ids", gap_wait="100ms", gap_then="skip") as s:
        got = [b.seq for b in s]
    assert got == [4], "resumed after the checkpoint, past the hole at 3"
    assert [e.event for e in s.events][:2] == ["gap", "skipped"]
    c.delete_consumer("pcap.sz", "lax", "ids")
    with pytest.raises(plumb.NotFound, match="no stream consumer ids"):
        s.state()


def test_pipelines(plumb, server):
    c = plumb.connect(server.addr)
    job = yaml.safe_dump({"job": "raw", "from": "earliest", "queues": ["pcap.sz"], "stages": [
        {"name": "decode", "inputs": ["pcap.sz"], "program": "builtin:decode", "outputs": ["pcap"]}]})
    res = c.submit_job(job, file="raw.yaml")
    assert res["state"] == "accepted", res
    assert [j["name"] for j in c.jobs()] == ["raw"]
    with pytest.raises(plumb.JobRejected, match="x.yaml") as rejected:
        c.submit_job("job: x\nstages: []\n", file="x.yaml")
    assert rejected.value.result["state"] == "rejected" and isinstance(rejected.value, plumb.InvalidArgument)
    c.put(name(1), CAPTURES[0].read_bytes())
    deadline = time.time() + 30
    while not any(q["queue"] == "pcap" and q["blocks"] == 1 for q in c.queues()):
        assert time.time() < deadline, "the stage produced nothing in 30 s"
        time.sleep(0.05)
    assert c.get(name(1, queue="pcap")).data == CAPTURES[0].read_bytes()
    [st] = c.stats()
    assert (st["stage"], st["runs"]) == ("raw/decode", 1)
    assert any(r["queue"] == "pcap.sz" and r["backlog"] == 0 for r in c.status())


def test_errors_name_what_is_wrong(plumb, server):
    c = plumb.connect(server.addr)
    with pytest.raises(plumb.NotFound, match="block 20250505-151105-00000042.lax.pcap.sz is not stored"):
        c.get(name(42))
    with pytest.raises(plumb.NotFound, match="no queue nope"):
        c.blocks("nope")
    # A misspelt queue or site reads as an error, not as an empty one.
    with pytest.raises(plumb.NotFound, match="no queue nope"):
        list(c.consume("nope", "g"))
    with pytest.raises(plumb.NotFound, match="no queue nope"):
        list(c.windows("nope", "g", spec={"size": "2"}))
    with pytest.raises(plumb.NotFound, match="no queue nope"):
        c.stream("nope", "lax", consumer="ids")
    c.put(name(1), b"lax 1")
    with pytest.raises(plumb.NotFound, match="queue pcap.sz has no site nrt"):
        c.stream("pcap.sz", "nrt", consumer="ids")
    with pytest.raises(plumb.InvalidArgument, match="not a block name"):
        c.put("x.pcap", b"1")
    with pytest.raises(plumb.InvalidArgument, match="unknown field"):
        c.action("ack", {"queue": "pcap.sz", "grop": "x"})
    assert issubclass(plumb.NotFound, KeyError) and issubclass(plumb.InvalidArgument, ValueError)


@pytest.fixture
def secured(plumb_bin, tmp_path):
    """A server with TLS and users: ana reads dns.*, the agent writes pcap.sz."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=plumb",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    users = tmp_path / "users.yaml"
    secrets = {}
    for user, group in [("ana", "analysts"), ("agent", "capture")]:
        out = subprocess.run([plumb_bin, "user", "add", user, "--group", group, "--users", str(users)],
                             capture_output=True, text=True, check=True)
        secrets[user] = out.stdout.strip()
    key_out = subprocess.run([plumb_bin, "user", "key", "agent", "--users", str(users)],
                             capture_output=True, text=True, check=True)
    token = tmp_path / "agent.key"
    token.write_text(key_out.stdout.strip() + "\n")
    doc = yaml.safe_load(users.read_text())
    doc["rules"] = [{"queues": "pcap.sz", "groups": ["capture"], "allow": ["write", "read"]},
                    {"queues": "dns.*", "groups": ["analysts"], "allow": ["read"]}]
    users.write_text(yaml.safe_dump(doc))
    s = Server(plumb_bin, tmp_path / "data", ["--users", str(users), "--tls-cert", str(cert), "--tls-key", str(key)])
    yield s, secrets, str(cert), str(token)
    s.stop()


def test_auth_and_tls(plumb, secured):
    server, secrets, ca, token = secured
    agent = plumb.connect(server.addr, token_file=token, tls_ca=ca)
    assert agent.put(name(1), b"captured") == "stored"
    assert agent.get(name(1)).data == b"captured"
    ana = plumb.connect(server.addr, user="ana", secret=secrets["ana"], tls_ca=ca)
    assert ana.queues() == []  # pcap.sz is not hers to see
    with pytest.raises(plumb.PermissionDenied, match="pcap.sz"):
        ana.get(name(1))
    with pytest.raises(plumb.PermissionDenied, match="pcap.sz"):
        ana.put(name(2), b"x")
    with pytest.raises(plumb.Unauthenticated):
        plumb.connect(server.addr, user="ana", secret="wrong", tls_ca=ca).queues()
    with pytest.raises(plumb.Unauthenticated):
        plumb.connect(server.addr, tls_ca=ca).queues()
    with pytest.raises(plumb.PlumbError):  # TLS is required: plain gRPC does not get through
        plumb.connect(server.addr, user="ana", secret=secrets["ana"], timeout=5)


def test_group_from_a_time(plumb, server):
    """A group started at a time, as Kafka's offsets_for_times starts a
    consumer, gets the blocks kept from that event time on (whatever their
    arrival order) and every block that arrives after it is made."""
    c = plumb.connect(server.addr)

    def at(seq, day):
        return name(seq, day=day)
    # Arrival order is not time order: 3 is from the 4th, and came late.
    assert c.put_many([(at(1, 5), b"1"), (at(2, 6), b"2"), (at(3, 4), b"3"), (at(4, 7), b"4")]) == ["stored"] * 4
    start = dt.datetime(2025, 5, 6, tzinfo=dt.timezone.utc)
    assert [b.name for b in c.consume("pcap.sz", group="replay", start=start)] == [at(2, 6), at(4, 7)]
    assert c.put(at(5, 1), b"5") == "stored"  # after the group was made: owed, old as it is
    assert [b.name for b in c.consume("pcap.sz", group="replay")] == [at(5, 1)]
    # The same start as RFC 3339 text; a naive datetime is refused.
    assert [b.name for b in c.consume("pcap.sz", group="text", start="2025-05-07T00:00:00Z")] == [at(4, 7)]
    with pytest.raises(plumb.InvalidArgument, match="timezone-aware"):
        list(c.consume("pcap.sz", group="naive", start=dt.datetime(2025, 5, 6)))
    with pytest.raises(plumb.InvalidArgument, match="RFC 3339"):
        list(c.consume("pcap.sz", group="bad", start="yesterday"))
