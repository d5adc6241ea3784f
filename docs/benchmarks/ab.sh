#!/usr/bin/env bash
# Two commits back to back on this machine, in one loader shape: each run
# gets a fresh `comb serve` with a new private PostgreSQL, then
# `comb loadtest -verify` with the flags given. Runs alternate A B A B … so
# that drift of a noisy machine falls on both alike.
#   docs/benchmarks/ab.sh BASE_REV NEW_REV [runs per side] [-- loadtest flags]
# Without flags: the closed-loop reference shape for 60 s,
#   -mode closed -pacers 64 -pop-partitions 4 -pop-batch 400 -duration 60s
# Prints each run's final and verify lines; full output under $OUT
# (default ./out/ab).
# A_CONFIG and B_CONFIG, when set, are `comb serve -config` files for the
# two sides, and A_AUTH and B_AUTH the loader's NATS credentials
# (user:password): both sides may then be one revision, to measure a
# configuration, as auth-ab.sh does. A_FLAGS and B_FLAGS are loadtest
# flags for one side only, added after the common ones: with one revision
# on both sides they measure a feature of the load itself, e.g.
#   A_FLAGS="-headers 0" B_FLAGS="-headers 256" docs/benchmarks/ab.sh HEAD HEAD 2
# NATS_PORT and PG_PORT move the broker's ports (24222 and 25433), so that
# two people's runs on one machine do not collide. HTTP_PORT, when set,
# puts the broker's HTTP listener there (-http; revisions before the
# listener lack the flag), and SCRAPE_EVERY (seconds) then has a curl loop
# fetch its /metrics that often during each run, as metrics-ab.sh does.
set -euo pipefail
. "$(dirname "$0")/ablib.sh"
ab_runs=2 ab_parse_args "$@"
flags=("${rest[@]}")
[ ${#flags[@]} -gt 0 ] || flags=(-mode closed -pacers 64 -pop-partitions 4 -pop-batch 400 -duration 60s)
top=$(git rev-parse --show-toplevel)
out=${OUT:-$top/out/ab}
mkdir -p "$out"
for rev in "$base" "$new"; do ab_build "$out" "$rev"; done
nats_port=${NATS_PORT:-24222} pg_port=${PG_PORT:-25433} http_port=${HTTP_PORT:-}
# The private cluster wants its password (docs/security.md); passfile names
# it, and a revision from before passwords ignores the missing file.
run() { # side rev index
	local side=$1 rev=$2 i=$3 data log conf auth name extra
	conf=$(eval echo "\${${side}_CONFIG:-}") auth=$(eval echo "\${${side}_AUTH:-}")
	extra=$(eval echo "\${${side}_FLAGS:-}")
	name=$rev
	# Sides that differ only in configuration, or one revision run against
	# itself, get the side in their files' names, or B's would replace A's.
	[ -z "${A_CONFIG:-}${A_AUTH:-}${B_CONFIG:-}${B_AUTH:-}${A_FLAGS:-}${B_FLAGS:-}" ] && [ "$base" != "$new" ] || name="$side-$rev"
	data=$(mktemp -d -t comb-ab-data.XXXXXX); chmod 755 "$data"
	log="$out/serve-$name-$i.log"
	local serve=("$out/comb-$rev" serve -data-dir "$data" -nats-listen 127.0.0.1:$nats_port -nats-http 0 -pg-port $pg_port)
	[ -z "$conf" ] || serve+=(-config "$conf")
	[ -z "$http_port" ] || serve+=(-http 127.0.0.1:$http_port)
	"${serve[@]}" >"$log" 2>&1 &
	local pid=$!
	ab_wait_ready "$log" $pid "$rev"
	local scraper=
	if [ -n "$http_port" ] && [ -n "${SCRAPE_EVERY:-}" ]; then
		(while kill -0 $pid 2>/dev/null; do
			curl -s -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$http_port/metrics" || true
			sleep "$SCRAPE_EVERY"
		done) >"$out/scrape-$name-$i.log" 2>&1 &
		scraper=$!
	fi
	"$out/comb-$rev" loadtest -nats "nats://${auth:+$auth@}127.0.0.1:$nats_port" \
		-postgres-url "postgres://postgres@127.0.0.1:$pg_port/comb?sslmode=disable&passfile=$data/postgres/comb-password" \
		"${flags[@]}" $extra -verify -report=false -out "$out/run-$name-$i" >"$out/run-$name-$i.out" 2>&1 || true
	[ -z "$scraper" ] || { kill $scraper; wait $scraper || true; }
	kill -INT $pid; wait $pid || true
	rm -rf "$data"
	printf '%s run %d: ' "$name" "$i"; grep -E '^\[(final|resources|verify)' "$out/run-$name-$i.out" | tr '\n' ' '; echo
}
for i in $(seq "$runs"); do
	run A "$base" "$i"
	run B "$new" "$i"
done
