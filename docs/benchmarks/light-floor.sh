#!/usr/bin/env bash
# What this machine allows at light load, beside what Comb does there, in
# one run: a fresh `comb serve` (its own PostgreSQL), then
#   1. pgbench on that PostgreSQL, one connection, one single-row INSERT a
#      transaction (each commit fsynced, as Comb's are): back to back, and
#      paced at RATE a second, as issue 13's bar paces its puts;
#   2. issue 13's bar command, `comb loadtest -target comb,jetstream
#      -jetstream-sync always -rate RATE -push-batch 1 -verify`, counting
#      the context switches (voluntary and not, every thread) of the
#      broker, the loader and PostgreSQL's processes while Comb's side runs.
# pgbench's paced latency is a floor under a put's round trip there: a put
# waits for one such commit, and for NATS both ways.
#   docs/benchmarks/light-floor.sh COMB_BINARY [RATE=1000] [SECONDS=20]
# NATS_PORT and PG_PORT move the broker's ports (24222, 25433). Needs
# PostgreSQL 15's pgbench (/usr/lib/postgresql/15/bin, or PGBENCH=path).
set -euo pipefail
bin=$(realpath "$1"); rate=${2:-1000}; secs=${3:-20}
nats_port=${NATS_PORT:-24222}; pg_port=${PG_PORT:-25433}
pgbench=${PGBENCH:-/usr/lib/postgresql/15/bin/pgbench}
data=$(mktemp -d -t comb-floor.XXXXXX); chmod 755 "$data"
"$bin" serve -data-dir "$data/comb" -nats-listen 127.0.0.1:$nats_port -nats-http 0 -pg-port $pg_port >"$data/serve.log" 2>&1 &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 150); do grep -q 'comb ready' "$data/serve.log" && break; sleep 0.2; done
export PGPASSFILE=$data/comb/postgres/comb-password
pg="-h 127.0.0.1 -p $pg_port -U postgres"
psql $pg -d comb -qc "CREATE DATABASE floor" >/dev/null
psql $pg -d floor -qc "CREATE TABLE t (id bigserial PRIMARY KEY, v text)" >/dev/null
echo "INSERT INTO t (v) VALUES ('x');" >"$data/insert.sql"
for paced in "" "-R $rate"; do
	echo "pgbench -c1 -M prepared ${paced:-(back to back)}, ${secs}s:"
	# shellcheck disable=SC2086
	"$pgbench" -n -c1 -T "$secs" -M prepared $paced $pg -f "$data/insert.sql" floor 2>&1 |
		grep -E 'latency|lag|^tps' | sed 's/^/  /'
done
psql $pg -d comb -qc "DROP DATABASE floor" >/dev/null

# switches PIDS...: the context switches so far of every thread of PIDS.
switches() {
	cat $(for p in "$@"; do ls -d /proc/$p/task/*/status 2>/dev/null; done) 2>/dev/null |
		awk '/ctxt_switches/ {s += $2} END {print s + 0}'
}
"$bin" loadtest -nats "nats://127.0.0.1:$nats_port" \
	-postgres-url "postgres://postgres@127.0.0.1:$pg_port/comb?sslmode=disable&passfile=$PGPASSFILE" -target comb,jetstream -jetstream-sync always \
	-rate "$rate" -push-batch 1 -duration "${secs}s" -verify -report=false -out "$data/run" >"$data/run.out" 2>&1 &
lpid=$!
# Comb's side runs first: count from its third second to its last but two.
sleep 4
pgs=$(pgrep -u postgres | tr '\n' ' ')
b0=$(switches $pid); l0=$(switches $lpid); p0=$(switches $pgs); t0=$(date +%s.%N)
sleep $((secs - 6))
b1=$(switches $pid); l1=$(switches $lpid); p1=$(switches $pgs); t1=$(date +%s.%N)
wait $lpid || true
grep -E '^\[(final|resources|verify)' "$data/run.out" | cut -c1-400
awk -v b=$((b1 - b0)) -v l=$((l1 - l0)) -v p=$((p1 - p0)) -v t0="$t0" -v t1="$t1" -v r="$rate" 'BEGIN {
	n = (t1 - t0) * r
	printf "context switches a message on Comb'"'"'s side (%.1f s): broker %.1f, loader %.1f, postgres %.1f, all %.1f\n",
		t1 - t0, b / n, l / n, p / n, (b + l + p) / n }'
