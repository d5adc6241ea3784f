#!/usr/bin/env bash
# Tried on 2026-12-06 and not kept (docs/benchmarks.md, "The bars on a
# quiet morning"): a profile-guided build of comb. This script wrote
# cmd/comb/default.pgo, the CPU profile `go build` uses by itself, on a
# scratch branch; comb built with it was within the noise of comb built
# without. Kept here as the record of how the profile was made. Run from
# the repository's top, it writes cmd/comb/default.pgo again:
#   docs/benchmarks/quiet-2026-12-06/pgo-profile.sh [seconds per shape]   (default 30)
# It builds comb without a profile (-pgo=off), starts a fresh
# `comb serve -pprof` with its own private PostgreSQL, and profiles the
# broker for the given seconds inside each of three loader shapes:
#   1. the closed-loop reference shape (-mode closed -pacers 64
#      -pop-partitions 4 -pop-batch 400);
#   2. single-message pushes from 256 producers (-mode closed -pacers 256
#      -push-batch 1);
#   3. issue 13's light load (-rate 1000 -push-batch 1).
# The three profiles are merged into one. Every run is verified; a run
# that does not verify clean stops the script and leaves the old profile.
# NATS_PORT, PG_PORT and PPROF_PORT move the ports (24222, 25433, 6060).
set -euo pipefail
secs=${1:-30}
top=$(git rev-parse --show-toplevel)
work=$(mktemp -d -t comb-pgo.XXXXXX); chmod 755 "$work"
nats_port=${NATS_PORT:-24222} pg_port=${PG_PORT:-25433} pprof_port=${PPROF_PORT:-6060}
pid=
cleanup() { [ -z "$pid" ] || { kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }; rm -rf "$work"; }
trap cleanup EXIT
(cd "$top" && go build -pgo=off -o "$work/comb" ./cmd/comb)
data="$work/data"; mkdir -p "$data"
"$work/comb" serve -data-dir "$data" -nats-listen 127.0.0.1:$nats_port -nats-http 0 -pg-port $pg_port \
	-pprof 127.0.0.1:$pprof_port >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 120); do grep -q 'comb ready' "$work/serve.log" && break; kill -0 $pid || { cat "$work/serve.log"; exit 1; }; sleep 0.5; done
grep -q 'comb ready' "$work/serve.log" || { echo "comb serve did not start" >&2; exit 1; }
pgurl="postgres://postgres@127.0.0.1:$pg_port/comb?sslmode=disable&passfile=$data/postgres/comb-password"
shape() { # name, loader flags...
	local name=$1; shift
	# The loader runs 10 s longer than the profile: 5 s to warm up, 5 s spare.
	"$work/comb" loadtest -nats nats://127.0.0.1:$nats_port -postgres-url "$pgurl" "$@" \
		-duration $((secs + 10))s -verify -report=false -out "$work/run-$name" >"$work/run-$name.out" 2>&1 &
	local loader=$!
	sleep 5
	curl -sf -o "$work/$name.pprof" "http://127.0.0.1:$pprof_port/debug/pprof/profile?seconds=$secs"
	wait $loader || true
	grep -E '^\[(final|verify)' "$work/run-$name.out"
	grep -q '^\[verify comb\] OK' "$work/run-$name.out" || { echo "$name: not verified clean, profile not written" >&2; exit 1; }
}
shape reference -mode closed -pacers 64 -pop-partitions 4 -pop-batch 400
shape single -mode closed -pacers 256 -push-batch 1
shape light -rate 1000 -push-batch 1
go tool pprof -proto "$work/reference.pprof" "$work/single.pprof" "$work/light.pprof" >"$work/merged.pprof" 2>/dev/null
cp "$work/merged.pprof" "$top/cmd/comb/default.pgo"
echo "wrote cmd/comb/default.pgo ($(wc -c <"$top/cmd/comb/default.pgo") bytes) from $(git -C "$top" rev-parse --short HEAD)"
