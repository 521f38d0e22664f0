#!/usr/bin/env bash
# The main job on the embedded default: start `plumb serve` on a fresh data
# directory, generate a DNS capture, ship it and the real captures in
# testdata through the agent path, submit three users' jobs that share
# their first stage, wait for them to drain, and show the merged graph, the
# stage statistics, what each queue holds, and the DNS tables read from
# Python and the Parquet lake from DuckDB. No outside services.
set -euo pipefail
plumb=${1:-bin/plumb}
work=$(mktemp -d)
addr=127.0.0.1:${PLUMB_DEMO_PORT:-18815}
web=127.0.0.1:${PLUMB_DEMO_HTTP_PORT:-18816}
export PLUMB_SERVER=$addr
cleanup() {
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$plumb" serve --data "$work/data" --listen "$addr" --http "$web" --latency-every 2s 2>"$work/serve.log" &
pid=$!
for _ in $(seq 100); do
  kill -0 "$pid" 2>/dev/null || { echo "plumb serve failed to start:" >&2; cat "$work/serve.log" >&2; exit 1; }
  "$plumb" queues >/dev/null 2>&1 && break
  sleep 0.1
done

echo "== the dashboard is at http://$web/ while the demo runs (PLUMB_DEMO_WAIT=1 keeps it up at the end)"
size=${PLUMB_DEMO_SIZE:-64MiB}
echo "== generate $size of DNS traffic"
"$plumb" synth --out "$work/synth.pcap" --size "$size" --seed 1

echo "== import it as site 'lax' in 8 MiB snappy blocks (the agent's path)"
"$plumb" import --quiet --site lax --new-instance --spool "$work/spool-lax" --block-size 8MiB "$work/synth.pcap"
echo "== import the public captures in testdata as site 'oarc'"
"$plumb" import --quiet --site oarc --new-instance --spool "$work/spool-oarc" --block-size 64KiB testdata/pcaps/*.pcap
echo "== import again: nothing is shipped twice"
"$plumb" import --quiet --site lax --spool "$work/spool-lax" --block-size 8MiB "$work/synth.pcap" 2>/dev/null

echo "== queues"
"$plumb" queues
echo "== first blocks of queue pcap.sz"
"$plumb" blocks pcap.sz | sed -n 1,4p

echo "== a consumer group reads every block once, acking each"
"$plumb" follow pcap.sz --group demo --out "$work/out" --from earliest --once | wc -l | awk '{print "  received " $1 " blocks"}'

echo "== alice, bob and carol submit their jobs; all start with the same decode stage"
"$plumb" job submit examples/jobs/alice-archive.yaml examples/jobs/bob-summary.yaml examples/jobs/carol-dns.yaml
echo "== the merged graph: a line per stage (the decode stage is shared by all three jobs; plumb graph prints it all as YAML)"
"$plumb" graph --short
echo "== stage statistics once the pipelines have drained"
"$plumb" stats --wait
echo "== how far behind each stage is"
"$plumb" status
echo "== what each queue holds (pcap, read by both, is gone once both are done with it)"
"$plumb" queues
echo "== bob's summary of the first block"
first=$("$plumb" blocks pcap.info | awk 'NR==2 {print $1}')
"$plumb" get -o - "$first"
echo "== carol's DNS: messages and transactions over Flight into pandas, and DuckDB over her Parquet lake"
PYTHONPATH=clients/python${PYTHONPATH:+:$PYTHONPATH} python3 scripts/demo_dns.py "$addr" "$work/data/blobs/blobs"
if [ -n "${PLUMB_DEMO_WAIT:-}" ]; then
  read -r -p "== the dashboard is at http://$web/; press Enter to stop the server " _
fi
