"""`make demo` as a new user runs it: the script ends well and shows the
DNS part, pandas over the records and DuckDB over the Parquet lake."""
import os
import re
import subprocess

from conftest import ROOT, free_port


def test_demo_shows_the_dns_path(plumb_bin):
    env = dict(os.environ, PLUMB_DEMO_PORT=str(free_port()), PLUMB_DEMO_HTTP_PORT=str(free_port()),
               PLUMB_DEMO_SIZE="4MiB")
    env.pop("PLUMB_DEMO_WAIT", None)
    run = subprocess.run(["scripts/demo.sh", plumb_bin], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    out = run.stdout
    assert "skipped" not in out, out[-2000:]
    # The real captures' top name, and both sites' latencies from pandas
    # and from DuckDB over the lake, which agree.
    assert re.search(r"oarc\s+google\.com\s+109", out), out[-3000:]
    pandas_rows = dict(re.findall(r"^\s+(lax|oarc)\s+\d+\s+\d+\s+[\d.]+\s+([\d.]+)$", out, re.M))
    duckdb_rows = dict(re.findall(r"^\s+(lax|oarc)\s+\d+\s+([\d.]+)$", out, re.M))
    assert set(pandas_rows) == {"lax", "oarc"}, out[-3000:]
    assert pandas_rows == duckdb_rows, out[-3000:]
