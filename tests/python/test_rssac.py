"""RSSAC002 metrics of a generated day: Plumb's `plumb rssac` against a
small independent computation here, from tshark's reading of the same
capture."""
import collections
import ipaddress
import shutil
import subprocess

import pytest
import yaml


def tshark_messages(path):
    """One tuple per DNS message as tshark sees it (TCP reassembled)."""
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.fail("tshark is not installed (.ci/run installs it)")
    out = subprocess.run([tshark, "-r", str(path), "-n", "-o", "tcp.desegment_tcp_streams:TRUE", "-Y", "dns",
                          "-T", "fields", "-E", "separator=\t", "-e", "ip.src", "-e", "ipv6.src", "-e", "udp.length",
                          "-e", "tcp.len", "-e", "dns.flags.response", "-e", "dns.flags.rcode", "-e", "dns.length"],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        ip4, ip6, udplen, tcplen, qrs, rcodes, lengths = line.split("\t")
        src = ip4 or ip6
        qrs = qrs.split(",")
        # tshark shows no rcode for queries.
        rcodes = [int(r) for r in rcodes.split(",")] if rcodes else [0] * len(qrs)
        if udplen:
            yield src, "udp", int(udplen) - 8, qrs[0] in ("1", "True"), rcodes[0]
            continue
        # A frame that completes several TCP messages lists each one.
        for qr, rcode, length in zip(qrs, rcodes, lengths.split(","), strict=True):
            yield src, "tcp", int(length), qr in ("1", "True"), rcode


def expected(path):
    vol = collections.Counter()
    sizes = collections.defaultdict(collections.Counter)
    rcodes = collections.Counter()
    v4, v6, v6agg = set(), set(), set()
    for src, tr, size, response, rcode in tshark_messages(path):
        addr = ipaddress.ip_address(src)
        fam = "ipv6" if addr.version == 6 else "ipv4"
        if response:
            vol[f"dns-{tr}-responses-sent-{fam}"] += 1
            lim, kind = 4096, "response"
            rcodes[rcode] += 1
        else:
            vol[f"dns-{tr}-queries-received-{fam}"] += 1
            lim, kind = 288, "request"
            if addr.version == 4:
                v4.add(addr)
            else:
                v6.add(addr)
                v6agg.add(ipaddress.ip_network(f"{addr}/64", strict=False))
        b = min(size, lim) // 16 * 16
        sizes[f"{tr}-{kind}-sizes"][f"{lim}-" if b >= lim else f"{b}-{b + 15}"] += 1
    return vol, sizes, rcodes, (len(v4), len(v6), len(v6agg))


def test_rssac_day_matches_an_independent_count(plumb_bin, tmp_path):
    cap = tmp_path / "day.pcap"
    subprocess.run([plumb_bin, "synth", "--out", str(cap), "--duration", "24h", "--rate", "0.2", "--tcp", "0.2",
                    "--ipv6", "0.4", "--sources", "500", "--seed", "4"], check=True, capture_output=True)
    out = subprocess.run([plumb_bin, "rssac", "--service", "x.root-servers.net", "--date", "2025-05-05", str(cap)],
                         check=True, capture_output=True, text=True).stdout
    docs = {d["metric"]: d for d in yaml.safe_load_all(out)}
    assert set(docs) == {"traffic-volume", "traffic-sizes", "rcode-volume", "unique-sources"}
    for d in docs.values():
        assert d["version"] == "rssac002v4" and d["service"] == "x.root-servers.net"
        assert str(d["start-period"]).startswith("2025-05-05")

    vol, sizes, rcodes, (n4, n6, n6agg) = expected(cap)
    assert sum(vol.values()) > 10000
    got_vol = {k: v for k, v in docs["traffic-volume"].items() if k.startswith("dns-") and v}
    assert got_vol == dict(vol)
    for name in ("udp-request-sizes", "udp-response-sizes", "tcp-request-sizes", "tcp-response-sizes"):
        assert (docs["traffic-sizes"][name] or {}) == dict(sizes[name]), name
    assert {k: v for k, v in docs["rcode-volume"].items() if isinstance(k, int)} == dict(rcodes)
    u = docs["unique-sources"]
    assert (u["num-sources-ipv4"], u["num-sources-ipv6"], u["num-sources-ipv6-aggregate"]) == (n4, n6, n6agg)
