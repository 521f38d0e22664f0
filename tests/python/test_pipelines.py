"""A team submits its pipeline and reads the results with nothing but
pyarrow: jobs, stats, the graph and faulty blocks are DoActions with JSON
bodies; outputs are blocks like any other."""
import gzip
import json
import time

import pyarrow.flight as fl
import pytest

from conftest import put_blocks, read_blocks

JOB = """
job: py-team
owner: carol
from: earliest
stages:
  - name: gz
    inputs: [raw]
    program: builtin:encode?codec=gzip
    outputs: [raw.gz]
    retention: forever
"""


def action(client, name, body=None):
    raw = json.dumps(body or {}).encode()
    return [json.loads(r.body.to_pybytes()) for r in client.do_action(fl.Action(name, raw))]


def name(seq):
    return f"20250505-000000-{seq:08d}.py.raw"


def test_submit_job_and_read_outputs(server):
    c = server.client()
    blocks = [(name(i), f"block {i} ".encode() * 1000) for i in range(1, 6)]
    assert all(r["status"] == "stored" for r in put_blocks(c, "raw", "py", blocks))

    [res] = action(c, "submit-job", {"file": "team.yaml", "yaml": JOB})
    assert res["state"] == "accepted", res
    assert res["stages"] == ["py-team/gz"]

    deadline = time.time() + 30
    while True:
        [stats] = action(c, "stats")
        if stats["runs"] == 5:
            break
        assert time.time() < deadline, stats
        time.sleep(0.1)
    assert stats["bytes_in"] == sum(len(d) for _, d in blocks)
    assert stats["owners"] == ["py-team/gz"]

    # Outputs keep their input's identity in the output queue.
    out = name(3).replace(".raw", ".raw.gz")
    reader = c.do_get(fl.Ticket(json.dumps({"block": out}).encode()))
    [(hdr, data)] = read_blocks(reader)
    assert hdr["name"] == out
    assert gzip.decompress(bytes(data)) == blocks[2][1]

    [graph] = action(c, "graph", {"format": "dot"})
    assert "py-team/gz" in graph["dot"]
    jobs = action(c, "list-jobs")
    assert [(j["name"], j["state"], j["owner"]) for j in jobs] == [("py-team", "accepted", "carol")]


def test_rejected_job_says_where(server):
    c = server.client()
    put_blocks(c, "raw", "py", [(name(1), b"x")])
    bad = JOB.replace("outputs: [raw.gz]", "outputs: [raw.gz]\n    colour: blue")
    [res] = action(c, "submit-job", {"file": "team.yaml", "yaml": bad})
    assert res["state"] == "rejected"
    assert "team.yaml:10:5: stage \"gz\".colour: unknown field" in res["reason"]


def test_faulty_and_retry(server):
    c = server.client()
    # A block that is not compressed data cannot be decoded: it is set
    # aside at once, and the good one flows.
    put_blocks(c, "raw", "py", [(name(1), b"\x1f\x8b not really gzip"), (name(2), gzip.compress(b"fine"))])
    [res] = action(c, "submit-job", {"yaml": "job: dec\nfrom: earliest\nstages:\n"
                                              "  - {name: d, inputs: [raw], program: builtin:decode, outputs: [plain], retention: forever}\n"})
    assert res["state"] == "accepted", res
    deadline = time.time() + 30
    while not action(c, "faulty"):
        assert time.time() < deadline
        time.sleep(0.1)
    [fb] = action(c, "faulty", {"queue": "raw"})
    assert fb["block"] == name(1) and "malformed" in fb["error"], fb
    [requeued] = action(c, "retry", {"block": name(1)})
    assert requeued == {"requeued": 1}
    with pytest.raises(Exception, match='action "no-such-action" is not known'):
        action(c, "no-such-action")
