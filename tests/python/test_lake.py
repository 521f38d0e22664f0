"""The Parquet lake: a team runs builtin:dns and builtin:dnspairs into
builtin:parquet, and analysts query the files in place, in a directory
store and in a real MinIO bucket, with pyarrow.dataset and DuckDB, as
they would with Spark or Trino."""
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from conftest import TESTDATA, Server, free_port, put_blocks, run_job

JOB = """
job: lake
from: earliest
stages:
  - {name: dns, inputs: [pcap], program: builtin:dns, outputs: [dns.arrow], retention: forever}
  - {name: lake, inputs: [dns.arrow], program: builtin:parquet, outputs: [dns.parquet], retention: forever}
  - {name: pairs, inputs: [pcap], program: builtin:dnspairs, outputs: [dns.pairs]}
  - {name: pairs-lake, inputs: [dns.pairs], program: builtin:parquet, outputs: [pairs.parquet], retention: forever}
"""

# Two sites on two days: dnscap's UDP capture (41 answered queries) and its
# TCP capture (41 more, over one connection).
BLOCKS = [("pcap", "lax", "20161020-151621-00000001.lax.pcap", "dnscap__dns.pcap"),
          ("pcap", "ams", "20180110-112241-00000001.ams.pcap", "dnscap__dnso1tcp.pcap")]


def fill(server):
    c = server.client()
    for queue, site, name, capture in BLOCKS:
        put_blocks(c, queue, site, [(name, (TESTDATA / "pcaps" / capture).read_bytes())])
    run_job(c, JOB, 8)


def check_lake(records, pairs):
    """What an analyst asks of the two lakes, through pyarrow and DuckDB."""
    import duckdb

    t = records.to_table()
    assert t.num_rows == 164
    assert set(t.column("site").to_pylist()) == {"lax", "ams"}
    assert sorted(str(d) for d in set(t.column("date").to_pylist())) == ["2016-10-20", "2018-01-10"]
    assert str(t.schema.field("time").type) == "timestamp[us, tz=UTC]"
    # Partition pruning: one site's files only.
    lax = records.to_table(filter=ds.field("site") == "lax")
    assert lax.num_rows == 82 and set(lax.column("transport").to_pylist()) == {"udp"}

    con = duckdb.connect()
    con.register("records", records)
    con.register("pairs", pairs)
    rows = con.sql("select site, count(*) n, count(*) filter (where qr) responses from records "
                   "group by site order by site").fetchall()
    assert rows == [("ams", 82, 41), ("lax", 82, 41)], rows
    [(answers,)] = con.sql("select count(*) from (select unnest(answers) a from records) where a.type = 1").fetchall()
    assert answers > 0
    assert con.sql("select count(*) from records where edns_do").fetchall() == [(0,)]

    rows = con.sql("select site, count(*) n, count(*) filter (where unanswered) unanswered, "
                   "count(*) filter (where orphan_response) orphans, max(latency) < 1e9 from pairs "
                   "group by site order by site").fetchall()
    assert rows == [("ams", 41, 0, 0, True), ("lax", 41, 0, 0, True)], rows
    [(qname, n)] = con.sql("select qname, count(*) from pairs where site = 'lax' group by qname "
                           "order by 2 desc limit 1").fetchall()
    assert qname == "google.com" and n > 10


def wait_for_files(root, n):
    deadline = time.time() + 30
    while len(list(Path(root).rglob("*.parquet"))) < n:
        assert time.time() < deadline, list(Path(root).rglob("*"))
        time.sleep(0.1)


def test_lake_in_a_directory_store(plumb_bin, tmp_path):
    import duckdb

    server = Server(plumb_bin, tmp_path / "data")
    try:
        fill(server)
        root = tmp_path / "data" / "blobs" / "blobs"  # the store, and its blobs under it
        lake, plake = root / "dns.parquet", root / "pairs.parquet"
        files = sorted(str(p.relative_to(lake)) for p in lake.rglob("*.parquet"))
        assert [f.rsplit("/", 1)[0] for f in files] == ["date=2016-10-20/site=lax", "date=2018-01-10/site=ams"], files
        check_lake(ds.dataset(lake, format="parquet", partitioning="hive"),
                   ds.dataset(plake, format="parquet", partitioning="hive"))
        # DuckDB straight from the files, as a notebook would.
        [(n,)] = duckdb.sql(f"select count(*) from read_parquet('{lake}/**/*.parquet', hive_partitioning=true) "
                            "where site = 'ams' and transport = 'tcp'").fetchall()
        assert n == 82
    finally:
        server.stop()


@pytest.fixture
def minio(tmp_path):
    binary = shutil.which("minio") or shutil.which(os.path.expanduser("~/go/bin/minio"))
    if binary is None:
        pytest.fail("minio is not installed (.ci/run installs it with go install)")
    addr, console = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env = dict(os.environ, MINIO_ROOT_USER="plumbtest", MINIO_ROOT_PASSWORD="plumbtest-secret",
               MINIO_BROWSER="off", MINIO_UPDATE="off", MINIO_CI_CD="1")
    log = open(tmp_path / "minio.log", "wb")
    proc = subprocess.Popen([binary, "server", "--quiet", "--address", addr, "--console-address", console,
                             str(tmp_path / "minio")], env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while True:
        try:
            if urllib.request.urlopen(f"http://{addr}/minio/health/ready", timeout=1).status == 200:
                break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("minio did not start: " + (tmp_path / "minio.log").read_text())
        time.sleep(0.1)
    yield addr
    proc.kill()
    proc.wait()
    log.close()


def test_lake_in_minio_read_through_pyarrow_s3(plumb_bin, tmp_path, minio, monkeypatch):
    from pyarrow import fs

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "plumbtest")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "plumbtest-secret")
    server = Server(plumb_bin, tmp_path / "data", extra=["--store", f"s3://plumb-lake?endpoint={minio}"])
    try:
        fill(server)
        s3 = fs.S3FileSystem(access_key="plumbtest", secret_key="plumbtest-secret", endpoint_override=minio,
                             scheme="http", region="us-east-1")
        files = s3.get_file_info(fs.FileSelector("plumb-lake/dns.parquet", recursive=True))
        parts = sorted(f.path.split("/")[2] + "/" + f.path.split("/")[3] for f in files if f.path.endswith(".parquet"))
        assert parts == ["date=2016-10-20/site=lax", "date=2018-01-10/site=ams"], [f.path for f in files]
        check_lake(ds.dataset("plumb-lake/dns.parquet", filesystem=s3, format="parquet", partitioning="hive"),
                   ds.dataset("plumb-lake/pairs.parquet", filesystem=s3, format="parquet", partitioning="hive"))
    finally:
        server.stop()


def iceberg_rows(data, table, want, timeout=60):
    """The rows pyiceberg reads of a table of the server's SQL catalog,
    once it holds want of them."""
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("plumb", uri=f"sqlite:///{data}/iceberg/catalog.db", warehouse=f"file://{data}/iceberg/warehouse")
    deadline = time.time() + timeout
    while True:
        try:
            t = cat.load_table(table).scan().to_arrow()
            if t.num_rows >= want:
                return t
        except Exception:  # the table is made at the first sync
            if time.time() > deadline:
                raise
            t = None
        if time.time() > deadline:
            raise AssertionError(f"{table} holds {t and t.num_rows} rows after {timeout} s; want {want}")
        time.sleep(0.2)


def test_lake_as_an_iceberg_table(plumb_bin, tmp_path):
    """Each lake queue is an Iceberg table of the server's SQL catalog
    (DATA/iceberg/catalog.db), which pyiceberg loads and reads: the same
    rows as the records ticket gives of the records the lake was made
    of, and after a restart (the tables synced again from a catalog
    opened anew) and the same job submitted again, still each row once."""
    data = tmp_path / "data"
    extra = ("--iceberg-every", "200ms")
    server = Server(plumb_bin, data, extra)
    try:
        fill(server)
        records = iceberg_rows(data, "plumb.dns", 164)
        pairs = iceberg_rows(data, "plumb.pairs", 82)
        assert records.num_rows == 164 and pairs.num_rows == 82
        import json
        import pyarrow.flight as fl
        ticket = {"records": "dns.arrow", "columns": ["time", "qname", "src"]}
        direct = server.client().do_get(fl.Ticket(json.dumps(ticket).encode())).read_all()
        key = lambda t: sorted(zip([str(x) for x in t.column("time").to_pylist()], t.column("qname").to_pylist(),
                                   t.column("src").to_pylist()))
        assert key(records) == key(direct)
    finally:
        server.stop()
    # Restarted, with the same job submitted again: nothing twice.
    server = Server(plumb_bin, data, extra)
    try:
        c = server.client()
        run_job(c, JOB.replace("job: lake", "job: lake-again"), 0)
        time.sleep(2)  # ten syncs
        assert iceberg_rows(data, "plumb.dns", 164).num_rows == 164
        assert iceberg_rows(data, "plumb.pairs", 82).num_rows == 82
    finally:
        server.stop()


def wait_compacted(cat, table, want, timeout=60):
    """The table, its files, its rows and its compacted files, once it
    holds want rows, a compacted file and at most one other. A block that
    lands after the day's compaction stays a file of its own until another
    joins it; several that landed after it (a busy machine) are joined by
    the next compaction, which is what this waits for."""
    deadline, err = time.time() + timeout, None
    while True:
        files = rows = None
        try:
            t = cat.load_table(table)
            files = t.inspect.files()
            rows = t.scan().to_arrow()
            compacted = [p for p in files.column("file_path").to_pylist() if "/compacted/" in p]
            if compacted and rows.num_rows == want and files.num_rows <= 2:
                return t, files, rows, compacted
        except Exception as e:  # the table is made at the first sync
            err = e
        assert time.time() < deadline, (files and files.column("file_path").to_pylist(), rows and rows.num_rows, err)
        time.sleep(0.2)


def test_iceberg_table_compacted(plumb_bin, tmp_path):
    """A site's past day of block files is compacted into one file of the
    table: pyiceberg reads the same rows, from one file per day and site,
    sorted by registered domain. A privacy age set with pyiceberg then
    rewrites the day without addresses."""
    data = tmp_path / "data"
    server = Server(plumb_bin, data, ("--iceberg-every", "200ms", "--iceberg-compact-every", "1s"))
    try:
        env = dict(os.environ, PLUMB_SERVER=server.addr)
        subprocess.run([plumb_bin, "import", "--quiet", "--site", "ams", "--new-instance", "--queue", "pcap",
                        "--codec", "none", "--spool", str(tmp_path / "spool"), "--block-size", "4KiB",
                        str(TESTDATA / "pcaps" / "dnscap__dnso1tcp.pcap")], env=env, check=True)
        run_job(server.client(), JOB, 1)
        from pyiceberg.catalog.sql import SqlCatalog
        cat = SqlCatalog("plumb", uri=f"sqlite:///{data}/iceberg/catalog.db", warehouse=f"file://{data}/iceberg/warehouse")
        t, files, rows, compacted = wait_compacted(cat, "plumb.dns", 82)
        assert len(compacted) == 1 and files.num_rows <= 2, files.column("file_path").to_pylist()
        [path] = compacted
        assert "/iceberg/warehouse/plumb/dns/compacted/date=2018-01-10/site=ams/" in path
        import pyarrow.parquet as pq
        domains = [d or "" for d in pq.read_table(path.removeprefix("file://")).column("registered_domain").to_pylist()]
        assert domains == sorted(domains)

        # The table's owner sets a privacy age (and a TTL of a century)
        # as table properties, as any engine can: the past day is
        # rewritten with every address null, nothing else lost.
        deadline = time.time() + 60
        while True:
            try:
                with cat.load_table("plumb.dns").transaction() as tx:
                    tx.set_properties({"plumb.privacy-after": "1d", "plumb.ttl": "36500d"})
                break
            except Exception:  # the server committed first: load and try again
                assert time.time() < deadline
                time.sleep(0.2)
        while True:
            t = cat.load_table("plumb.dns")
            paths = t.inspect.files().column("file_path").to_pylist()
            if paths and all(p.endswith("-private.parquet") for p in paths):
                break
            assert time.time() < deadline, paths
            time.sleep(0.2)
        purged = t.scan().to_arrow()
        assert purged.num_rows == 82
        for col in ("src", "dst", "ecs_address"):
            assert purged.column(col).null_count == 82, col
            assert not t.schema().find_field(col).required, col
        assert sorted(purged.column("qname").to_pylist()) == sorted(rows.column("qname").to_pylist())
    finally:
        server.stop()


def test_iceberg_table_in_minio(plumb_bin, tmp_path, minio, monkeypatch):
    """With an S3 store the tables live in its bucket
    (s3://BUCKET/plumb-iceberg/warehouse): pyiceberg, given the bucket's
    endpoint and keys, loads the table from the catalog and reads the
    same rows as the records ticket, from the file compaction wrote into
    the bucket."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "plumbtest")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "plumbtest-secret")
    data = tmp_path / "data"
    server = Server(plumb_bin, data, ["--store", f"s3://plumb-lake?endpoint={minio}",
                                      "--iceberg-every", "200ms", "--iceberg-compact-every", "1s"])
    try:
        env = dict(os.environ, PLUMB_SERVER=server.addr)
        subprocess.run([plumb_bin, "import", "--quiet", "--site", "ams", "--new-instance", "--queue", "pcap",
                        "--codec", "none", "--spool", str(tmp_path / "spool"), "--block-size", "4KiB",
                        str(TESTDATA / "pcaps" / "dnscap__dnso1tcp.pcap")], env=env, check=True)
        run_job(server.client(), JOB, 1)
        from pyiceberg.catalog.sql import SqlCatalog
        cat = SqlCatalog("plumb", uri=f"sqlite:///{data}/iceberg/catalog.db",
                         **{"s3.endpoint": f"http://{minio}", "s3.access-key-id": "plumbtest",
                            "s3.secret-access-key": "plumbtest-secret", "s3.region": "us-east-1"})
        t, files, rows, compacted = wait_compacted(cat, "plumb.dns", 82)
        assert t.metadata_location.startswith("s3://plumb-lake/plumb-iceberg/warehouse/plumb/dns/metadata/")
        for path in compacted:
            assert path.startswith("s3://plumb-lake/plumb-iceberg/warehouse/plumb/dns/compacted/date=2018-01-10/site=ams/"), path
        for path in files.column("file_path").to_pylist():
            assert path.startswith("s3://plumb-lake/"), path
        import json
        import pyarrow.flight as fl
        ticket = {"records": "dns.arrow", "columns": ["time", "qname", "src"]}
        direct = server.client().do_get(fl.Ticket(json.dumps(ticket).encode())).read_all()
        key = lambda t: sorted(zip([str(x) for x in t.column("time").to_pylist()], t.column("qname").to_pylist(),
                                   t.column("src").to_pylist()))
        assert key(rows) == key(direct)
    finally:
        server.stop()


M2 = Path.home() / ".m2" / "repository"
SPARK_JARS = [M2 / "org/apache/iceberg/iceberg-spark-runtime-3.5_2.12/1.7.1/iceberg-spark-runtime-3.5_2.12-1.7.1.jar",
              M2 / "org/xerial/sqlite-jdbc/3.46.1.3/sqlite-jdbc-3.46.1.3.jar"]


def test_iceberg_table_read_by_spark(plumb_bin, tmp_path):
    """Spark with Iceberg's runtime loads the same tables from the same
    catalog, as a JDBC catalog over the SQLite file, and counts the same
    rows as pyiceberg, site by site."""
    missing = [str(j) for j in SPARK_JARS if not j.exists()]
    if missing:
        pytest.fail(f"{missing} missing (.ci/run fetches them with mvn dependency:get)")
    from pyspark.sql import SparkSession

    data = tmp_path / "data"
    server = Server(plumb_bin, data, ("--iceberg-every", "200ms"))
    try:
        fill(server)
        want = iceberg_rows(data, "plumb.dns", 164)
        iceberg_rows(data, "plumb.pairs", 82)
    finally:
        server.stop()
    spark = (SparkSession.builder.master("local[1]").appName("plumb-lake")
             .config("spark.jars", ",".join(str(j) for j in SPARK_JARS))
             .config("spark.ui.enabled", "false")
             .config("spark.sql.catalog.plumb", "org.apache.iceberg.spark.SparkCatalog")
             .config("spark.sql.catalog.plumb.catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog")
             .config("spark.sql.catalog.plumb.uri", f"jdbc:sqlite:{data}/iceberg/catalog.db")
             .config("spark.sql.catalog.plumb.warehouse", f"file://{data}/iceberg/warehouse")
             .getOrCreate())
    try:
        rows = spark.sql("select instance, count(*) n, count_if(qr) responses from plumb.plumb.dns "
                         "group by instance order by instance").collect()
        assert [tuple(r) for r in rows] == [("ams", 82, 41), ("lax", 82, 41)], rows
        assert spark.sql("select count(*) from plumb.plumb.pairs").collect()[0][0] == 82
        sites = want.column("instance").to_pylist()
        assert sorted(set(sites)) == ["ams", "lax"] and len(sites) == 164
    finally:
        spark.stop()
