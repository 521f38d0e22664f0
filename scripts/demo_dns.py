"""The DNS part of `make demo`: a Python client reads the messages and the
transactions into pandas, and DuckDB reads the Parquet lake in place.

usage: demo_dns.py HOST:PORT LAKE_DIR
"""
import sys

try:
    import duckdb
    import pandas  # noqa: F401  (to_pandas needs it)
    import plumb_client as plumb
except ImportError as e:
    print(f"  (skipped: Python module {e.name} is missing; "
          "pip install pyarrow pandas duckdb clients/python to see this part)")
    sys.exit(0)

addr, lake = sys.argv[1], sys.argv[2]
c = plumb.connect(addr)

queries = c.records("dns.arrow", columns=["instance", "qname"], where={"qr": False}).to_pandas()
print(f"  {len(queries):,} queries; the top 10 names:")
top = queries.groupby("instance", observed=True)["qname"].value_counts().groupby(level=0, observed=True).head(10)
print(top.to_string().replace("\n", "\n  ").join(["  ", ""]))

pairs = c.records("dns.pairs", columns=["instance", "latency", "unanswered", "orphan_response"]).to_pandas()
answered = pairs[pairs["latency"].notna()]
print("\n  transactions per site: answered, unanswered, and latency p50/p99 in ms")
per_site = answered.groupby("instance", observed=True)["latency"].agg(
    p50=lambda s: s.quantile(0.5).total_seconds() * 1e3, p99=lambda s: s.quantile(0.99).total_seconds() * 1e3)
per_site.insert(0, "unanswered", pairs[pairs["unanswered"]].groupby("instance", observed=True).size())
per_site.insert(0, "answered", answered.groupby("instance", observed=True).size())
per_site["unanswered"] = per_site["unanswered"].fillna(0).astype(int)
print(per_site.round(2).to_string().replace("\n", "\n  ").join(["  ", ""]))

print(f"\n  DuckDB over the Parquet lake in {lake} (Hive partitions date=/site=):")
sql = (f"select site, count(*) as answered, round(quantile_cont(latency, 0.99) / 1e6, 2) as p99_ms "
       f"from read_parquet('{lake}/pairs.parquet/*/*/*.parquet', hive_partitioning = true) "
       f"where latency is not null group by site order by site")
print("  " + sql)
print(duckdb.sql(sql).df().to_string(index=False).replace("\n", "\n  ").join(["  ", ""]))
