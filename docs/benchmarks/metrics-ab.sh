#!/usr/bin/env bash
# The cost of Prometheus metrics on the hot path: one revision, back to
# back, with metrics off (A) and on (B), the HTTP listener scraped every
# second on both sides (A answers 404).
#   docs/benchmarks/metrics-ab.sh [REV] [runs per side] [-- loadtest flags]
# REV defaults to HEAD; the flags default to ab.sh's closed-loop shape.
# NATS_PORT, PG_PORT and HTTP_PORT default to 28222, 28433 and 28480.
set -euo pipefail
rev=${1:-HEAD}
[ $# -gt 0 ] && shift
top=$(git rev-parse --show-toplevel)
out=${OUT:-$top/out/metrics-ab}
mkdir -p "$out"
off=$out/metrics-off.conf on=$out/metrics-on.conf
echo 'comb { metrics: false }' >"$off"
echo 'comb { metrics: true }' >"$on"
rev=$(git -C "$top" rev-parse --short "$rev")
A_CONFIG=$off B_CONFIG=$on SCRAPE_EVERY=1 NATS_PORT=${NATS_PORT:-28222} PG_PORT=${PG_PORT:-28433} HTTP_PORT=${HTTP_PORT:-28480} \
	OUT=$out exec "$top/docs/benchmarks/ab.sh" "$rev" "$rev" "$@"
