#!/usr/bin/env bash
# Retention at full rate: does the database reach a plateau?
#   docs/benchmarks/retention-plateau.sh RATE DURATION RETENTION [NAME]
# e.g. the bar of the retention issue, half the closed-loop maximum:
#   docs/benchmarks/retention-plateau.sh 75000 60m 300s plateau-60m
# and its quick version (10 minutes, completed_retention_s 60):
#   docs/benchmarks/retention-plateau.sh 75000 10m 60s plateau-10m
# A fresh `comb serve` (private cluster, the durable settings) built from
# this checkout; the database size before the load; the loader in the
# reference shape with -verify, samples every second (samples.csv,
# report.png under $OUT/NAME); then 10 minutes of sampling after the load
# (NAME-after.csv: database, segments and retained messages every 10 s;
# AFTER_S sets how long, default 600).
# Ports 34222 (NATS), 35433 (PostgreSQL), 38480 (HTTP); data in $WORK.
set -euo pipefail
rate=$1 duration=$2 retention=$3 name=${4:-plateau}
top=$(git rev-parse --show-toplevel)
out=${OUT:-$top/out/plateau}
work=${WORK:-/tmp/comb-plateau}
mkdir -p "$out"
rm -rf "$work" && mkdir -p "$work"
(cd "$top" && go build -o "$work/comb" ./cmd/comb)
"$work/comb" serve -data-dir "$work/data" -nats-listen 127.0.0.1:34222 -nats-http 0 -pg-port 35433 -http 127.0.0.1:38480 > "$work/serve.log" 2>&1 &
serve=$!
trap 'kill -INT $serve 2>/dev/null; wait $serve 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do grep -q "comb ready" "$work/serve.log" && break; sleep 0.5; done
grep -q "comb ready" "$work/serve.log" || { cat "$work/serve.log"; exit 1; }
pg="postgres://postgres@127.0.0.1:35433/comb?sslmode=disable&passfile=$work/data/postgres/comb-password"
sql() { psql "$pg" -Atc "$1"; }
segs="(SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits WHERE inhparent = 'comb_segments'::regclass)"
sql "SELECT 'empty database MB: ' || round(pg_database_size(current_database())/1048576.0, 1)" | tee "$out/$name.out"
cmd=(loadtest -nats nats://127.0.0.1:34222 -postgres-url "$pg" -queue "$name" -rate "$rate"
	-pop-partitions 4 -pop-batch 400 -completed-retention "$retention" -duration "$duration"
	-interval 60s -verify -out "$out/$name")
echo "+ comb ${cmd[*]}" | sed 's/passfile=[^ ]*/passfile=…/' | tee -a "$out/$name.out"
"$work/comb" "${cmd[@]}" 2>&1 | tee -a "$out/$name.out"
echo "elapsed_after_load_s,db_size_mb,segments_mb,retained_messages,retained_payload_mb" > "$out/$name-after.csv"
after=${AFTER_S:-600}
for i in $(seq 0 10 "$after"); do
	row=$(sql "SELECT round(pg_database_size(current_database())/1048576.0, 1), round($segs/1048576.0, 1),
		(SELECT coalesce(sum(next_offset - low_offset), 0) FROM comb_partitions),
		(SELECT round(coalesce(sum(retained_bytes), 0)/1048576.0, 1) FROM comb_partitions)" | tr '|' ',')
	echo "$i,$row" | tee -a "$out/$name-after.csv"
	if [ "$i" -lt "$after" ]; then sleep 10; fi
done
