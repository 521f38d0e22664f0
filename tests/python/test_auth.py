"""Authentication and access control as a pyarrow user meets them.

A real `plumb serve --users FILE`, users made with `plumb user add` and
rules written into the file as an operator would: an agent may write the
capture queues, an analyst may read dns.* only.
"""
import json
import subprocess

import pyarrow.flight as fl
import pytest
import yaml

from conftest import Server, put_blocks, read_blocks


def name(queue, seq):
    return f"20250505-151105-{seq:08d}.lax.{queue}"


def add_user(plumb_bin, users, user, group):
    out = subprocess.run([plumb_bin, "user", "add", user, "--group", group, "--users", str(users)],
                         capture_output=True, text=True, check=True)
    secret = out.stdout.strip()
    assert secret and secret not in users.read_text(), "the secret must be shown once and stored only as a hash"
    return secret


@pytest.fixture
def secured(plumb_bin, tmp_path):
    users = tmp_path / "users.yaml"
    secrets = {u: add_user(plumb_bin, users, u, g)
               for u, g in [("ana", "analysts"), ("lax-agent", "capture"), ("ops", "operators")]}
    doc = yaml.safe_load(users.read_text())
    doc["rules"] = [
        {"queues": "pcap.sz", "groups": ["capture"], "allow": ["write"]},
        {"queues": "dns.*", "groups": ["capture"], "allow": ["write"]},
        {"queues": "dns.*", "groups": ["analysts"], "allow": ["read"]},
        {"queues": "*", "groups": ["operators"], "allow": ["admin"]},
    ]
    users.write_text(yaml.safe_dump(doc))  # keeps the file's mode 600
    s = Server(plumb_bin, tmp_path / "data", ["--users", str(users)])
    yield s, secrets
    s.stop()


def login(client, user, secret):
    return fl.FlightCallOptions(headers=[client.authenticate_basic_token(user, secret)])


def action(client, typ, body, options):
    return [json.loads(r.body.to_pybytes())
            for r in client.do_action(fl.Action(typ, json.dumps(body).encode()), options=options)]


def test_unauthenticated_calls_are_refused(secured):
    server, secrets = secured
    c = server.client()
    with pytest.raises(fl.FlightUnauthenticatedError, match="authenticate_basic_token"):
        list(c.list_flights())
    with pytest.raises(fl.FlightUnauthenticatedError):
        c.authenticate_basic_token("ana", secrets["ops"])  # another user's secret
    with pytest.raises(fl.FlightUnauthenticatedError):
        c.authenticate_basic_token("nobody", "x")
    forged = fl.FlightCallOptions(headers=[(b"authorization", b"Bearer not-a-token")])
    with pytest.raises(fl.FlightUnauthenticatedError):
        list(c.list_flights(options=forged))


def test_analyst_sees_and_reads_only_dns(secured):
    server, secrets = secured
    c = server.client()
    agent = login(c, "lax-agent", secrets["lax-agent"])
    assert put_blocks(c, "pcap.sz", "lax", [(name("pcap.sz", 1), b"capture bytes")], options=agent)[0]["status"] == "stored"
    assert put_blocks(c, "dns.arrow", "lax", [(name("dns.arrow", 1), b"dns rows")], options=agent)[0]["status"] == "stored"
    # The agent may write but not read.
    with pytest.raises(fl.FlightUnauthorizedError, match="no read permission on queue pcap.sz"):
        read_blocks(c.do_get(fl.Ticket(json.dumps({"block": name("pcap.sz", 1)}).encode()), options=agent))

    ana = login(c, "ana", secrets["ana"])
    assert [f.descriptor.path[0].decode() for f in c.list_flights(options=ana)] == ["dns.arrow"]
    [(hdr, data)] = read_blocks(c.do_get(fl.Ticket(json.dumps({"queue": "dns.arrow"}).encode()), options=ana))
    assert bytes(data) == b"dns rows"
    with pytest.raises(fl.FlightUnauthorizedError, match="user ana has no read permission on queue pcap.sz"):
        read_blocks(c.do_get(fl.Ticket(json.dumps({"block": name("pcap.sz", 1)}).encode()), options=ana))
    with pytest.raises(fl.FlightUnauthorizedError):
        c.get_flight_info(fl.FlightDescriptor.for_path("pcap.sz"), options=ana)
    with pytest.raises(fl.FlightUnauthorizedError):
        put_blocks(c, "dns.arrow", "lax", [(name("dns.arrow", 2), b"forged")], options=ana)

    # A job reading pcap.sz from ana is refused, naming the queue.
    job = ("job: sneaky\nstages:\n"
           "  - {name: peek, inputs: [pcap.sz], program: builtin:decode, outputs: [dns.peek]}\n")
    [res] = action(c, "submit-job", {"file": "sneaky.yaml", "yaml": job}, ana)
    assert res["state"] == "rejected"
    assert "user ana may not read queue pcap.sz" in res["reason"]
    assert "sneaky.yaml:3:26" in res["reason"]  # at the inputs that name it
    # Admin actions need admin: ana may not requeue faulty blocks; ops may.
    with pytest.raises(fl.FlightUnauthorizedError, match="no admin permission"):
        action(c, "retry", {}, ana)
    ops = login(c, "ops", secrets["ops"])
    assert action(c, "retry", {}, ops) == [{"requeued": 0}]
