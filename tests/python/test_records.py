"""DNS messages as a table: a team runs builtin:dns over captures and reads
the rows with pyarrow and pandas through a records ticket."""
import json

import pandas as pd
import pyarrow as pa
import pyarrow.flight as fl
import pytest

from conftest import TESTDATA, put_blocks, run_job

JOB = """
job: dns
from: earliest
stages:
  - {name: dns, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow], retention: forever}
"""


def records(client, **ticket):
    return client.do_get(fl.Ticket(json.dumps(ticket).encode()))


def test_records_ticket_reads_dns_rows_as_pandas(server):
    c = server.client()
    udp = (TESTDATA / "pcaps" / "dnscap__dns.pcap").read_bytes()
    tcp = (TESTDATA / "pcaps" / "dnscap__dnso1tcp.pcap").read_bytes()
    put_blocks(c, "pcap", "lax", [("20161020-151621-00000001.lax.pcap", udp),
                                  ("20161020-151700-00000002.lax.pcap", tcp)])
    put_blocks(c, "pcap", "ams", [("20161020-151621-00000001.ams.pcap", udp)])
    run_job(c, JOB, 3)

    df = records(c, records="dns.arrow").read_pandas()
    assert len(df) == 246
    assert (df["transport"] == "udp").sum() == 164 and (df["transport"] == "tcp").sum() == 82
    assert set(df["instance"]) == {"lax", "ams"} and set(df["seq"]) == {1, 2}
    # Few values, so categories: each block's instance and the transports
    # are dictionaries (a new one per block on the stream).
    assert isinstance(df["instance"].dtype, pd.CategoricalDtype) and isinstance(df["transport"].dtype, pd.CategoricalDtype)
    assert (df["instance"] == "ams").sum() == 82
    assert str(df["time"].dtype) == "datetime64[ns, UTC]"
    assert df.loc[0, "qname"] == "google.com" and df.loc[0, "src"] == "172.17.0.10"
    assert not df["malformed"].any()

    responses = records(c, records="dns.arrow", columns=["seq", "id", "qname", "rcode"],
                        filter=[{"column": "qr", "op": "=", "value": True},
                                {"column": "transport", "op": "=", "value": "tcp"}]).read_pandas()
    assert list(responses.columns) == ["seq", "id", "qname", "rcode"]
    assert len(responses) == 41 and set(responses["seq"]) == {2}

    # A sequence range picks blocks; an empty selection is an empty table.
    assert len(records(c, records="dns.arrow", **{"from": 2, "to": 2}).read_pandas()) == 82
    empty = records(c, records="dns.arrow", instance="nowhere", columns=["qname"]).read_pandas()
    assert len(empty) == 0 and list(empty.columns) == ["qname"]


def test_records_ticket_errors_name_the_problem(server):
    c = server.client()
    # An unknown queue is not an empty table.
    with pytest.raises(pa.ArrowKeyError, match="no queue dns.arrow"):  # NOT_FOUND
        records(c, records="dns.arrow").read_all()
    job = JOB + "queues: [pcap]\n"  # agents will ship into it
    [res] = [json.loads(r.body.to_pybytes()) for r in c.do_action(fl.Action("submit-job", json.dumps({"yaml": job}).encode()))]
    assert res["state"] == "accepted", res
    # A queue a stage will fill: an empty table with its columns.
    assert records(c, records="dns.arrow", columns=["qname"]).read_all().column_names == ["qname"]
    with pytest.raises(pa.ArrowInvalid, match='records ticket: no column "nope"'):  # INVALID_ARGUMENT
        records(c, records="dns.arrow", columns=["nope"]).read_all()
    with pytest.raises(pa.ArrowInvalid, match="want an RFC 3339 time or a sequence number"):
        records(c, records="dns.arrow", **{"from": "yesterday"}).read_all()
    with pytest.raises(pa.ArrowInvalid, match="like works on string columns"):
        records(c, records="dns.arrow", filter=[{"column": "qtype", "op": "like", "value": "1%"}]).read_all()


def test_records_flight_info_filters_and_limit(server):
    """GetFlightInfo and GetSchema on a records command give the table's
    schema and a ticket; in, like, suffix, is_null and limit select rows
    in the scan."""
    c = server.client()
    udp = (TESTDATA / "pcaps" / "dnscap__dns.pcap").read_bytes()
    put_blocks(c, "pcap", "lax", [("20161020-151621-00000001.lax.pcap", udp)])
    run_job(c, JOB, 1)

    cmd = {"records": "dns.arrow", "columns": ["time", "qname", "qtype", "rcode"],
           "filter": [{"column": "qname", "op": "suffix", "value": "in-addr.arpa"}]}
    desc = fl.FlightDescriptor.for_command(json.dumps(cmd).encode())
    info = c.get_flight_info(desc)
    assert info.schema.names == ["time", "qname", "qtype", "rcode"]
    assert c.get_schema(desc).schema == info.schema
    t = c.do_get(info.endpoints[0].ticket).read_all()
    assert t.num_rows > 0 and all(n.endswith(".in-addr.arpa") for n in t.column("qname").to_pylist())
    assert t.schema == info.schema

    def rows(**ticket):
        return records(c, records="dns.arrow", **ticket).read_all()

    assert rows(limit=5).num_rows == 5
    everything = rows()
    assert rows(limit=10 ** 9).num_rows == everything.num_rows == 82
    assert set(rows(filter=[{"column": "qtype", "op": "in", "value": [1, 12]}])
               .column("qtype").to_pylist()) == {1, 12}
    like = rows(filter=[{"column": "qname", "op": "like", "value": "goo%.c_m"}]).column("qname").to_pylist()
    assert like and set(like) == {"google.com"}
    assert rows(filter=[{"column": "edns_version", "op": "is_null"}]).num_rows == 82
    assert rows(filter=[{"column": "edns_version", "op": "not_null"}]).num_rows == 0
    with pytest.raises(pa.ArrowKeyError, match="no queue nope.arrow"):
        c.get_flight_info(fl.FlightDescriptor.for_command(json.dumps({"records": "nope.arrow"}).encode()))


def test_answers_options_and_names_in_pandas_polars_duckdb(server):
    """The records carry the answer sections, EDNS options, client subnet
    and name columns; pandas, polars and DuckDB read them, and DuckDB
    takes edns_do (do is a reserved word there)."""
    import duckdb
    import polars as pl

    c = server.client()
    ecs = (TESTDATA / "pcaps" / "zeek__dns-edns-ecs.pcap").read_bytes()
    put_blocks(c, "pcap", "lax", [("20160518-051550-00000001.lax.pcap", ecs)])
    run_job(c, JOB, 1)
    table = records(c, records="dns.arrow").read_all()
    for col in ["answers", "authority", "additional", "edns_options", "edns_do", "ecs_address", "ecs_source_prefix",
                "ede", "cookie", "qname_raw", "labels", "tld", "registered_domain", "tunnel", "partial"]:
        assert col in table.column_names, col
    assert "do" not in table.column_names

    df = table.to_pandas()
    soa = df[df["qtype"] == 6].iloc[0]
    assert soa["answers"][0]["rdata"].startswith("ns1.weberdns.de. webmaster.weberdns.de. ")
    assert soa["tld"] == "de" and soa["registered_domain"] == "weberdns.de" and soa["labels"] == 2
    with_ecs = df[df["ecs_address"].notna()]
    assert len(with_ecs) > 0 and set(with_ecs["ecs_address"]) >= {"213.61.29.0"}
    assert set(with_ecs["ecs_source_prefix"]) == {24, 56}  # IPv4 /24s and IPv6 /56s

    pl_df = pl.from_arrow(table)
    assert pl_df.filter(pl.col("ecs_address").is_not_null()).height == len(with_ecs)

    con = duckdb.connect()
    con.register("t", table)
    assert con.execute("select count(*) from t where edns_do").fetchone()[0] == int(df["edns_do"].sum())
    a = con.execute("select a.rdata from t, unnest(answers) as u(a) where a.type = 1 order by 1 limit 1").fetchone()[0]
    assert a.count(".") == 3
