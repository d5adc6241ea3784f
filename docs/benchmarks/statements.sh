#!/usr/bin/env bash
# What PostgreSQL runs for one loader shape, by kind of statement: a fresh
# database on a PostgreSQL that preloads pg_stat_statements, one
# `comb serve` on it, one `comb loadtest -verify`, then the calls and
# execution time of pops (the ready set, candidates by key, one partition),
# acks, pushes and the rest. Plans and planning time are counted when the
# server also sets pg_stat_statements.track_planning=on (0 otherwise).
#   PGURL=postgres://postgres@127.0.0.1:25500 docs/benchmarks/statements.sh COMB_BINARY [loadtest flags]
# PGURL names the server without a database (it creates and drops "comb");
# the server needs shared_preload_libraries=pg_stat_statements. NATS_PORT
# moves the broker's port (24222).
set -euo pipefail
bin=$1; shift
: "${PGURL:?set PGURL to a PostgreSQL server that preloads pg_stat_statements}"
nats_port=${NATS_PORT:-24222}
psql "$PGURL/postgres" -qc "DROP DATABASE IF EXISTS comb" -qc "CREATE DATABASE comb" >/dev/null
psql "$PGURL/comb" -qc "CREATE EXTENSION pg_stat_statements" >/dev/null
data=$(mktemp -d -t comb-statements.XXXXXX)
"$bin" serve -data-dir "$data" -nats-listen 127.0.0.1:$nats_port -nats-http 0 -postgres-url "$PGURL/comb?sslmode=disable" >"$data/serve.log" 2>&1 &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 150); do grep -q 'comb ready' "$data/serve.log" && break; sleep 0.2; done
psql "$PGURL/comb" -qAtc "SELECT pg_stat_statements_reset()" >/dev/null
"$bin" loadtest -nats "nats://127.0.0.1:$nats_port" -postgres-url "$PGURL/comb?sslmode=disable" -verify -report=false "$@" |
	grep -E '^\[(final|resources|verify)'
psql "$PGURL/comb" <<'SQL'
SELECT CASE
         WHEN q LIKE '%y.queue_id = $1 AND $3::bigint =%' THEN 'pop: the ready set'
         WHEN q LIKE '%p.id = ANY($3::bigint[]) AND $1::bigint >%' THEN 'pop: candidates by key'
         WHEN q LIKE '%WHERE p.id = $3 AND p.next_offset > p.low_offset%' THEN 'pop: one partition by key'
         WHEN q LIKE 'WITH x AS%unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[])%' THEN 'ack'
         WHEN q LIKE 'INSERT INTO comb_segments%'
           OR q LIKE 'UPDATE comb_partitions p SET next_offset%'
           OR q LIKE 'WITH u AS ( UPDATE comb_partitions p SET next_offset%'
           OR q LIKE 'SELECT id FROM comb_partitions WHERE id = ANY($1) ORDER BY id FOR UPDATE%'
           THEN 'push (3 statements a transaction)'
         WHEN q LIKE 'UPDATE comb_cursors c SET lease_id = CASE WHEN x.auto%' THEN 'push: hand-off to waiting pops'
         WHEN lower(q) IN ('begin', 'commit') THEN 'BEGIN, COMMIT'
         WHEN q LIKE 'SELECT set_config(%' THEN 'plan settings (keyedPlansSQL)'
         ELSE 'other'
       END AS kind,
       sum(calls) AS calls, round(sum(total_exec_time)::numeric) AS exec_ms,
       sum(plans) AS plans, round(sum(total_plan_time)::numeric) AS plan_ms
FROM (SELECT btrim(regexp_replace(query, '\s+', ' ', 'g')) AS q, calls, total_exec_time, plans, total_plan_time FROM pg_stat_statements) s
GROUP BY 1 ORDER BY 2 DESC;
SQL
