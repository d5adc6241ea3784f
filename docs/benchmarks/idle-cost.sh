#!/usr/bin/env bash
# What an idle broker costs PostgreSQL after docs/benchmarks/scale has made
# a big queue: one `comb serve` on a fresh database of an outside
# PostgreSQL that preloads pg_stat_statements, the scale command once, then
# the statements PostgreSQL ran over IDLE seconds with nothing sent.
#   PGURL=postgres://postgres@127.0.0.1:25500 docs/benchmarks/idle-cost.sh COMB_BINARY SCALE_BINARY PARTITIONS [IDLE]
# PGURL names the server without a database (it drops and creates "comb").
set -euo pipefail
bin=$1 scale=$2 n=$3 idle=${4:-120}
pg=${PGURL:?set PGURL}
psql "$pg/postgres" -qc "DROP DATABASE IF EXISTS comb" -qc "CREATE DATABASE comb" >/dev/null
data=$(mktemp -d -t comb-idle.XXXXXX); chmod 755 "$data"
"$bin" serve -data-dir "$data" -nats-listen 127.0.0.1:${NATS_PORT:-24222} -nats-http 0 -postgres-url "$pg/comb?sslmode=disable" >"$data/serve.log" 2>&1 &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 200); do grep -q "comb ready" "$data/serve.log" && break; sleep 0.3; done
psql "$pg/comb" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
"$scale" -nats nats://127.0.0.1:${NATS_PORT:-24222} -partitions "$n" -pops 10 | cut -c1-200
psql "$pg/comb" -qAt -c "SELECT pg_stat_statements_reset()" >/dev/null
sleep "$idle"
echo "over ${idle} s idle, by total execution time:"
psql "$pg/comb" -c "SELECT calls, round(total_exec_time) AS exec_ms, round(total_exec_time / greatest(calls, 1)) AS ms_a_call,
    left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS statement
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'comb')
  ORDER BY total_exec_time DESC LIMIT 8"
