#!/usr/bin/env bash
# Closed-loop throughput of two commits, back to back on this machine, in the
# reference shape: each run gets a fresh `comb serve` with a new private
# PostgreSQL, then `comb loadtest -mode closed -pacers 64 -pop-partitions 4
# -pop-batch 400 -verify`. Runs alternate A B A B … so that drift of a noisy
# machine falls on both alike.
#   docs/benchmarks/ab-closed.sh BASE_REV NEW_REV [runs per side] [seconds]
# Prints each run's final line and writes the full output under $OUT
# (default ./out/ab-closed).
set -euo pipefail
base=$1 new=$2 runs=${3:-2} secs=${4:-60}
top=$(git rev-parse --show-toplevel)
out=${OUT:-$top/out/ab-closed}
mkdir -p "$out"
for rev in "$base" "$new"; do
	dir=$(mktemp -d -t comb-ab.XXXXXX)
	git -C "$top" worktree add -q --detach "$dir" "$rev"
	(cd "$dir" && go build -o "$out/comb-$rev" ./cmd/comb)
	git -C "$top" worktree remove --force "$dir"
done
nats_port=24222 pg_port=25433
run() { # rev index
	local rev=$1 i=$2 data log
	data=$(mktemp -d -t comb-ab-data.XXXXXX); chmod 755 "$data"
	log="$out/serve-$rev-$i.log"
	"$out/comb-$rev" serve -data-dir "$data" -nats-listen 127.0.0.1:$nats_port -nats-http 0 -pg-port $pg_port >"$log" 2>&1 &
	local pid=$!
	for _ in $(seq 300); do grep -q 'comb ready' "$log" && break; sleep 0.2; done
	grep -q 'comb ready' "$log" || { echo "serve $rev did not start"; cat "$log"; kill $pid; exit 1; }
	"$out/comb-$rev" loadtest -nats nats://127.0.0.1:$nats_port \
		-postgres-url "postgres://postgres@127.0.0.1:$pg_port/comb?sslmode=disable" \
		-mode closed -pacers 64 -pop-partitions 4 -pop-batch 400 -duration "${secs}s" -verify \
		-report=false -out "$out/run-$rev-$i" >"$out/run-$rev-$i.out" 2>&1 || true
	kill -INT $pid; wait $pid || true
	rm -rf "$data"
	printf '%s run %d: ' "$rev" "$i"; grep -E '^\[(final|verify)' "$out/run-$rev-$i.out" | tr '\n' ' '; echo
}
for i in $(seq "$runs"); do
	run "$base" "$i"
	run "$new" "$i"
done
