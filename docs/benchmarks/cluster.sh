#!/usr/bin/env bash
# One bridge against three in one NATS cluster, on one PostgreSQL, back to
# back on this machine (docs/scaling.md). It starts a throwaway PostgreSQL
# with durable commits (as shared/tools/pg-ceiling.sh does), then for each
# run a fresh database and 1 or 3 `comb serve -postgres-url` processes, the
# three routed to each other, and `comb loadtest -verify` over a server
# list of all of them. Runs alternate 1 3 1 3 … so that drift of a noisy
# machine falls on both alike. Last, pg-ceiling.sh against the same
# PostgreSQL, when ../shared/tools has it.
#   docs/benchmarks/cluster.sh [runs per side] [-- loadtest flags]
# Without flags: the closed-loop reference shape for 60 s,
#   -mode closed -pacers 64 -pop-partitions 4 -pop-batch 400 -duration 60s
# Prints each run's final, resources and verify lines, and the brokers'
# CPU (user + system seconds over the run, from /proc); full output under
# $OUT (default ./out/cluster). PG_PORT (29432), NATS_PORT (29001, +1 per
# broker) and ROUTE_PORT (29101, +1 per broker) move the ports.
set -euo pipefail
runs=2
if [ $# -gt 0 ] && [ "$1" != "--" ]; then runs=$1; shift; fi
[ "${1:-}" = "--" ] && shift
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(-mode closed -pacers 64 -pop-partitions 4 -pop-batch 400 -duration 60s)
top=$(git rev-parse --show-toplevel)
out=${OUT:-$top/out/cluster}
mkdir -p "$out"
(cd "$top" && go build -o "$out/comb" ./cmd/comb)
pg_port=${PG_PORT:-29432} nats_port=${NATS_PORT:-29001} route_port=${ROUTE_PORT:-29101}
export PGOPTIONS="-c client_min_messages=warning"

tmp=$(mktemp -d -t comb-cluster.XXXXXX); chmod 755 "$tmp"; chown postgres "$tmp"
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
runuser -u postgres -- "$bin/initdb" -D "$tmp/data" -A trust -U postgres >/dev/null
runuser -u postgres -- "$bin/pg_ctl" -D "$tmp/data" -l "$tmp/log" -w \
	-o "-p $pg_port -k $tmp -c listen_addresses=127.0.0.1 -c shared_buffers=512MB -c max_wal_size=4GB -c max_connections=300" start >/dev/null
pids=() loader=
cleanup() {
	[ -z "$loader" ] || kill -TERM "$loader" 2>/dev/null || true
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	runuser -u postgres -- "$bin/pg_ctl" -D "$tmp/data" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
admin="postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable"

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # clock ticks, user + system

run() { # brokers index
	local n=$1 i=$2 db="comb_${1}_$2" servers=() routes=() k
	psql "$admin" -qc "CREATE DATABASE $db" >/dev/null
	local pg="postgres://postgres@127.0.0.1:$pg_port/$db?sslmode=disable"
	for k in $(seq 0 $((n - 1))); do routes+=("nats-route://127.0.0.1:$((route_port + k))"); done
	pids=()
	for k in $(seq 0 $((n - 1))); do
		local data log cluster=()
		data=$(mktemp -d -t comb-cluster-data.XXXXXX)
		log="$out/serve-$n-$i-$k.log"
		if [ "$n" -gt 1 ]; then
			local others
			others=$(printf '%s\n' "${routes[@]}" | grep -v ":$((route_port + k))$" | paste -sd,)
			cluster=(-cluster-name comb -cluster-listen "127.0.0.1:$((route_port + k))" -routes "$others")
		fi
		"$out/comb" serve -server-name "comb-$k" -data-dir "$data" -postgres-url "$pg" \
			-nats-listen "127.0.0.1:$((nats_port + k))" -nats-http 0 -http "" \
			-lame-duck-duration 1s -lame-duck-grace-period 200ms "${cluster[@]}" >"$log" 2>&1 &
		pids+=($!)
		servers+=("nats://127.0.0.1:$((nats_port + k))")
	done
	for k in $(seq 0 $((n - 1))); do
		local log="$out/serve-$n-$i-$k.log"
		for _ in $(seq 300); do grep -q 'comb ready' "$log" && break; sleep 0.2; done
		grep -q 'comb ready' "$log" || { echo "serve $n-$i-$k did not start"; cat "$log"; exit 1; }
	done
	# Routes come up within a second of the last start (nats-server's
	# first retry); the loader connects after.
	[ "$n" -eq 1 ] || sleep 2
	local before=() after=()
	for p in "${pids[@]}"; do before+=("$(cpu "$p")"); done
	local t0 t1
	t0=$(date +%s.%N)
	"$out/comb" loadtest -nats "$(IFS=,; echo "${servers[*]}")" -postgres-url "$pg" -verify \
		-out "$out/run-$n-$i" "${flags[@]}" >"$out/loadtest-$n-$i.out" 2>&1 &
	loader=$!
	wait "$loader" || true
	loader=
	t1=$(date +%s.%N)
	for p in "${pids[@]}"; do after+=("$(cpu "$p")"); done
	local ticks=0
	for k in "${!pids[@]}"; do ticks=$((ticks + ${after[$k]} - ${before[$k]})); done
	echo "== $n bridge(s), run $i"
	grep -E '^\[(final|resources|verify)' "$out/loadtest-$n-$i.out" || tail -5 "$out/loadtest-$n-$i.out"
	awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v a="$t0" -v b="$t1" -v n="$n" \
		'BEGIN { printf "[brokers] %d process(es): %.2f cores together over the run (%.0f CPU s)\n", n, t / hz / (b - a), t / hz }'
	for p in "${pids[@]}"; do kill -TERM "$p"; done
	for p in "${pids[@]}"; do wait "$p" || true; done
	pids=()
	psql "$admin" -qc "DROP DATABASE $db" >/dev/null
}

uptime
for i in $(seq "$runs"); do
	run 1 "$i"
	run 3 "$i"
done
uptime
ceiling=$top/../shared/tools/pg-ceiling.sh
if [ -x "$ceiling" ] || [ -f "$ceiling" ]; then
	echo "== pg-ceiling.sh 15, the same PostgreSQL"
	psql "$admin" -qc "CREATE DATABASE ceiling" >/dev/null
	PGURL="postgres://postgres@127.0.0.1:$pg_port/ceiling?sslmode=disable" bash "$ceiling" 15
fi
