#!/usr/bin/env bash
# docs/benchmarks/scale at two commits back to back: each run gets a fresh
# `comb serve` with a new private PostgreSQL, then one run of the scale
# command per size given. Runs alternate A B A B … per size.
#   docs/benchmarks/scale-ab.sh BASE_REV NEW_REV [runs per side] [-- sizes]
# Sizes default to 200 and 1000000 partitions; each run is
#   scale -partitions N -ready-pct 1 -pops 300 -broker-pid <pid>
# with the broker's PostgreSQL, built from NEW_REV's tree (the command
# prints "-" for what a revision lacks). Prints each run's line; full
# output under $OUT (default ./out/scale-ab). NATS_PORT and PG_PORT move
# the broker's ports (24222 and 25433). SCALE_FLAGS adds flags to every
# run, e.g. SCALE_FLAGS="-settle 5s".
set -euo pipefail
. "$(dirname "$0")/ablib.sh"
ab_runs=1 ab_parse_args "$@"
sizes=("${rest[@]}")
[ ${#sizes[@]} -gt 0 ] || sizes=(200 1000000)
top=$(git rev-parse --show-toplevel)
out=${OUT:-$top/out/scale-ab}
mkdir -p "$out"
ab_build "$out" "$base"
ab_build "$out" "$new" ./docs/benchmarks/scale scale
nats_port=${NATS_PORT:-24222} pg_port=${PG_PORT:-25433}
run() { # rev size index
	local rev=$1 size=$2 i=$3 data log
	data=$(mktemp -d -t comb-scale-data.XXXXXX); chmod 755 "$data"
	log="$out/serve-$rev-$size-$i.log"
	"$out/comb-$rev" serve -data-dir "$data" -nats-listen 127.0.0.1:$nats_port -nats-http 0 -pg-port $pg_port >"$log" 2>&1 &
	local pid=$!
	ab_wait_ready "$log" $pid "$rev"
	printf '%s run %d: ' "$rev" "$i"
	"$out/scale" -nats "nats://127.0.0.1:$nats_port" \
		-postgres-url "postgres://postgres@127.0.0.1:$pg_port/comb?sslmode=disable&passfile=$data/postgres/comb-password" \
		-partitions "$size" -ready-pct 1 -pops 300 -broker-pid $pid ${SCALE_FLAGS:-} 2>>"$out/scale-$rev-$size-$i.err" || echo "scale failed, see $out/scale-$rev-$size-$i.err"
	kill -INT $pid; wait $pid || true
	rm -rf "$data"
}
for size in "${sizes[@]}"; do
	for i in $(seq "$runs"); do
		run "$base" "$size" "$i"
		run "$new" "$size" "$i"
	done
done
