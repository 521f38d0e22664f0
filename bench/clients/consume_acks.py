"""How much batched acknowledgement saves a Python consumer of small
blocks: 1,000 blocks of 100 bytes read through consume() with a round
trip per block (ack_every=1) against the default batches (ack_every=100,
ack_interval=1 s) and one manual ack of all, three alternated runs each,
on a fresh local server. Prints blocks/s, the ratio (aim: batched >= 10x
per-block) and the load average before each round.

    python3 bench/clients/consume_acks.py bin/plumb
"""
import hashlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))
import plumb_client  # noqa: E402

BLOCKS = 1000


def free_addr():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def main():
    plumb = sys.argv[1] if len(sys.argv) > 1 else "bin/plumb"
    with tempfile.TemporaryDirectory() as tmp:
        addr = free_addr()
        srv = subprocess.Popen([plumb, "serve", "--data", os.path.join(tmp, "data"), "--listen", addr, "--log-level", "error"])
        try:
            deadline = time.time() + 30
            while True:
                try:
                    socket.create_connection(addr.split(":"), timeout=0.2).close()
                    break
                except OSError:
                    if time.time() > deadline:
                        raise SystemExit("plumb serve did not start")
                    time.sleep(0.05)
            c = plumb_client.connect(addr)
            c.put_many([(f"20250505-000000-{i:08d}.lax.pcap.sz", hashlib.sha256(str(i).encode()).digest() * 3 + b"x" * 4)
                        for i in range(1, BLOCKS + 1)])
            ways = {
                "an ack per block (ack_every=1)": dict(ack_every=1, ack_interval=0),
                "batched (the default)": {},
                "manual, one ack of all": dict(ack="manual"),
            }
            rates = {w: [] for w in ways}
            loads = []
            for run in range(3):
                loads.append(open("/proc/loadavg").read()[:14])
                for w, kw in ways.items():
                    group = f"g{run}-{len(rates[w])}-{abs(hash(w))}"
                    start = time.monotonic()
                    names = [b.name for b in c.consume("pcap.sz", group, start="earliest", **kw)]
                    if kw.get("ack") == "manual":
                        c.ack("pcap.sz", group, *names)
                    took = time.monotonic() - start
                    assert len(names) == BLOCKS, (w, len(names))
                    rates[w].append(BLOCKS / took)
            print(f"== a Python consumer of {BLOCKS} small blocks, three runs each")
            print(f"{'':34s} {'blocks/s (median)':>18s} {'three runs':>26s}")
            for w, r in rates.items():
                print(f"{w:34s} {statistics.median(r):18.0f} {r[0]:8.0f} {r[1]:8.0f} {r[2]:8.0f}")
            per, batched = rates["an ack per block (ack_every=1)"], rates["batched (the default)"]
            ratios = [b / p for b, p in zip(batched, per)]
            print("batched / per-block: " + ", ".join(f"{x:.1f}x" for x in ratios) + " (aim >= 10x)")
            print("loadavg before each round:", loads)
        finally:
            srv.terminate()
            srv.wait()


if __name__ == "__main__":
    main()
