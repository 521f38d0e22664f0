"""One scenario through the three clients a user has, against one server:
the CLI imports a real capture and submits a DNS job; the Python package,
the Go package (examples/consumer and examples/records, built from package
client alone) and the CLI read it back. Every client must see the same
blocks with the same bytes, and the same DNS rows as `plumb dns` makes of
the capture locally."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, TESTDATA

CAPTURE = TESTDATA / "pcaps" / "zeek__dns-edns-ecs.pcap"  # signed, over UDP and TCP
JOB = """
job: compat
from: earliest
queues: [pcap.sz]
stages:
  - {name: dns, inputs: [pcap.sz], program: builtin:dns, outputs: [dns.arrow], retention: forever}
"""


def run(*args, cwd=None):
    p = subprocess.run(list(args), capture_output=True, text=True, cwd=cwd)
    assert p.returncode == 0, f"{' '.join(args)}: exit {p.returncode}\n{p.stderr}"
    return p.stdout


def files_sums(d: Path):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in d.iterdir()}


def rows(jsonl: str):
    """(time, qname, rcode, id) of each JSON line, sorted; times as
    arrow-go prints them, to the microsecond as this capture has them."""
    out = []
    for line in jsonl.splitlines():
        r = json.loads(line)
        day, _, frac = r["time"].rstrip("Z").partition(".")  # arrow-go trims trailing zeros
        out.append((f"{day}.{frac.ljust(6, '0')[:6]}Z", r["qname"], int(r["rcode"]), int(r["id"])))
    return sorted(out)


def test_same_scenario_through_every_client(plumb_bin, server, tmp_path):
    addr = server.addr
    run(plumb_bin, "import", "--quiet", "--server", addr, "--site", "lax", "--new-instance",
        "--spool", str(tmp_path / "spool"), "--block-size", "4KiB", str(CAPTURE))
    (tmp_path / "job.yaml").write_text(JOB)
    run(plumb_bin, "job", "submit", "--server", addr, str(tmp_path / "job.yaml"))
    run(plumb_bin, "stats", "--wait", "--server", addr)

    # Blocks: Python, the CLI and Go see the same names and bytes.
    sys.path.insert(0, str(ROOT / "clients" / "python"))
    import plumb_client
    c = plumb_client.connect(addr)
    py = {b.name: hashlib.sha256(b.data).hexdigest() for b in c.consume("pcap.sz", "py", start="earliest")}
    assert len(py) >= 3, f"the import cut {len(py)} blocks; the scenario wants several"
    cli_dir, go_dir = tmp_path / "cli", tmp_path / "go"
    cli_dir.mkdir()
    go_dir.mkdir()
    run(plumb_bin, "follow", "pcap.sz", "--server", addr, "--group", "cli", "--from", "earliest", "--once", "--out", str(cli_dir))
    bins = tmp_path / "bin"
    run("go", "build", "-o", str(bins) + "/", "./examples/consumer", "./examples/records", cwd=ROOT)
    run(str(bins / "consumer"), "-server", addr, "-group", "go", "-once", cwd=go_dir)
    assert files_sums(cli_dir) == py
    assert files_sums(go_dir) == py

    # DNS rows: the records ticket from Python and Go equals plumb dns on
    # the capture.
    cols = ["time", "qname", "rcode", "id"]
    t = c.records("dns.arrow", columns=cols)
    py_rows = sorted(zip((v.strftime("%Y-%m-%dT%H:%M:%S.%fZ") for v in t.column("time").to_pylist()),
                         t.column("qname").to_pylist(), t.column("rcode").to_pylist(), t.column("id").to_pylist()))
    go_out = run(str(bins / "records"), "-server", addr, "-records", "dns.arrow", "-columns", ",".join(cols))
    local = rows(run(plumb_bin, "dns", "-o", "-", str(CAPTURE)))
    assert len(local) > 50
    assert rows(go_out) == local, (rows(go_out)[:3], local[:3])
    assert py_rows == local, (py_rows[:3], local[:3])
