#!/usr/bin/env bash
# The main job on the embedded default: start `plumb serve` on a fresh data
# directory, upload the real captures in testdata as blocks, read them back
# as a consumer group, and show what the server holds. No outside services.
set -euo pipefail
plumb=${1:-bin/plumb}
work=$(mktemp -d)
addr=127.0.0.1:${PLUMB_DEMO_PORT:-18815}
export PLUMB_SERVER=$addr
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT

"$plumb" serve --data "$work/data" --listen "$addr" 2>"$work/serve.log" &
pid=$!
for _ in $(seq 100); do
  "$plumb" queues >/dev/null 2>&1 && break
  sleep 0.1
done

echo "== upload every capture in testdata/pcaps as blocks of queue 'pcap', instance 'demo'"
mkdir -p "$work/in"
seq=0
for f in testdata/pcaps/*.pcap; do
  seq=$((seq + 1))
  cp "$f" "$work/in/$(printf '20250505-151105-%08d.demo.pcap' "$seq")"
done
"$plumb" put "$work"/in/* | cut -f1 | sort | uniq -c | awk '{print "  " $1 " " $2}'
echo "== upload them again: every one is answered duplicate"
"$plumb" put "$work"/in/* | cut -f1 | sort | uniq -c | awk '{print "  " $1 " " $2}'

echo "== queues"
"$plumb" queues
echo "== first blocks of queue pcap"
"$plumb" blocks pcap | sed -n 1,4p

echo "== consumer group 'archive' reads every block once, acking each"
"$plumb" follow pcap --group archive --out "$work/out" --from earliest --once | wc -l | awk '{print "  received " $1 " blocks"}'
if diff -r "$work/in" "$work/out" >/dev/null; then
  echo "  all received blocks are byte-identical to the uploads"
else
  echo "  MISMATCH between uploaded and received blocks" >&2
  exit 1
fi
"$plumb" queues
