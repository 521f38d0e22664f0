"""Fixtures that run a real `plumb serve` for pyarrow tests.

The binary comes from $PLUMB_BIN, or is built with `go build` once per
session. Each test gets its own server on a free loopback port with a fresh
data directory.
"""
import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as fl
import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = ROOT / "testdata"
BLOCK_SCHEMA = pa.schema([("offset", pa.int64()), ("data", pa.binary())])


@pytest.fixture(scope="session")
def plumb_bin(tmp_path_factory):
    env_bin = os.environ.get("PLUMB_BIN")
    if env_bin:
        return env_bin
    out = tmp_path_factory.mktemp("bin") / "plumb"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/plumb"], cwd=ROOT, check=True)
    return str(out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, plumb_bin, data, extra=()):
        self.addr = f"127.0.0.1:{free_port()}"
        self.log = open(data.parent / "serve.log", "wb")
        self.proc = subprocess.Popen(
            [plumb_bin, "serve", "--data", str(data), "--listen", self.addr, *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while True:
            try:
                socket.create_connection(self.addr.split(":"), timeout=0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("plumb serve did not start: " + (data.parent / "serve.log").read_text())
                time.sleep(0.05)

    def client(self):
        return fl.FlightClient(f"grpc://{self.addr}")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            assert self.proc.wait(timeout=15) == 0, "plumb serve did not exit cleanly on SIGTERM"
        finally:
            self.log.close()


@pytest.fixture
def server(plumb_bin, tmp_path):
    s = Server(plumb_bin, tmp_path / "data")
    yield s
    s.stop()


def put_blocks(client, queue, instance, blocks, header_as_message=False, options=None):
    """Upload [(name, bytes)] as a user would with pyarrow; return the PutResults."""
    cmd = json.dumps({"queue": queue, "instance": instance}).encode()
    writer, reader = client.do_put(fl.FlightDescriptor.for_command(cmd), BLOCK_SCHEMA, options=options)
    for name, data in blocks:
        header = json.dumps({"name": name, "size": len(data),
                             "sha256": hashlib.sha256(data).hexdigest()}).encode()
        chunks = [data[i:i + (1 << 20)] for i in range(0, len(data), 1 << 20)] or [None]
        for i, chunk in enumerate(chunks):
            if chunk is None:
                batch = pa.record_batch([pa.array([], pa.int64()), pa.array([], pa.binary())], schema=BLOCK_SCHEMA)
            else:
                batch = pa.record_batch([pa.array([i << 20], pa.int64()), pa.array([chunk], pa.binary())],
                                        schema=BLOCK_SCHEMA)
            if i == 0 and header_as_message:
                writer.write_metadata(header)
                writer.write_batch(batch)
            elif i == 0:
                writer.write_with_metadata(batch, header)
            else:
                writer.write_batch(batch)
    writer.done_writing()
    results = []
    for _ in blocks:
        buf = reader.read()
        if buf is None:  # the server ended the call; close() raises its error
            break
        results.append(json.loads(buf.to_pybytes()))
    writer.close()
    return results


def read_blocks(reader, limit=None):
    """Read (header, bytes) pairs from a DoGet stream using read_chunk."""
    blocks = []
    cur = None
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        if chunk.app_metadata is not None:
            assert cur is None, "a new block header before the last block ended"
            cur = (json.loads(chunk.app_metadata.to_pybytes()), bytearray())
        if chunk.data is not None and chunk.data.num_rows:
            for off, data in zip(chunk.data.column("offset").to_pylist(), chunk.data.column("data").to_pylist()):
                assert off == len(cur[1]), "offsets must be contiguous"
                cur[1].extend(data)
        if cur is not None and len(cur[1]) == cur[0]["size"]:
            blocks.append(cur)
            cur = None
            if limit is not None and len(blocks) == limit:
                return blocks
    if cur is not None:
        blocks.append(cur)
    return blocks


def run_job(client, yaml, runs, timeout=60):
    """Submit a job and wait until its stages have made runs runs in all."""
    [res] = [json.loads(r.body.to_pybytes()) for r in client.do_action(fl.Action("submit-job", json.dumps({"yaml": yaml}).encode()))]
    assert res["state"] == "accepted", res
    deadline = time.time() + timeout
    while True:
        st = [json.loads(r.body.to_pybytes()) for r in client.do_action(fl.Action("stats", b"{}"))]
        if sum(s["runs"] for s in st) >= runs:
            return res
        assert time.time() < deadline, st
        time.sleep(0.1)
