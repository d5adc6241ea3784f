#!/usr/bin/env bash
# docs/benchmarks/light-cpu-2026-12-05/profile.sh COMB_BINARY OUTDIR: light load (1000 single-message puts/s) 30 s, CPU profile 20 s from t=6 s
set -euo pipefail
bin=$1 out=$2
mkdir -p $out
data=$(mktemp -d -t comb-prof.XXXXXX); chmod 755 $data
$bin serve -data-dir $data -nats-listen 127.0.0.1:24222 -nats-http 0 -pg-port 25433 -pprof 127.0.0.1:26060 > $out/serve.log 2>&1 &
pid=$!
for i in $(seq 100); do grep -q "comb ready" $out/serve.log 2>/dev/null && break; sleep 0.3; done
$bin loadtest -nats nats://127.0.0.1:24222 -postgres-url "postgres://postgres@127.0.0.1:25433/comb?sslmode=disable&passfile=$data/postgres/comb-password" -target comb -rate 1000 -push-batch 1 -duration 30s -verify -report=false -out $out/run > $out/run.out 2>&1 &
lpid=$!
sleep 6
curl -s -o $out/broker.pprof "http://127.0.0.1:26060/debug/pprof/profile?seconds=20"
wait $lpid || true
kill -INT $pid; wait $pid || true
rm -rf $data
grep -E '^\[(final|resources|verify)' $out/run.out
