#!/usr/bin/env bash
# docs/benchmarks/light-floor-2026-12-05/perf-postgres.sh COMB_BINARY OUTDIR: 1,000 single-message puts a second for 25 s; perf record -g of every PostgreSQL process for 10 s from t=8 s
bin=$1; out=$2; mkdir -p $out
data=$(mktemp -d); chmod 755 $data
$bin serve -data-dir $data -nats-listen 127.0.0.1:24222 -nats-http 0 -pg-port 25433 > $data/serve.log 2>&1 & pid=$!
for i in $(seq 100); do grep -q "comb ready" $data/serve.log 2>/dev/null && break; sleep 0.3; done
$bin loadtest -nats nats://127.0.0.1:24222 -target comb -rate 1000 -push-batch 1 -duration 25s -report=false -out $data/run > $data/run.out 2>&1 & lp=$!
sleep 8
perf record -F 999 -g -o $out/perf.data -p $(pgrep -u postgres -d, ) -- sleep 10 2>/dev/null >/dev/null
wait $lp; grep -E "^\[final" $data/run.out | cut -c1-250
kill -INT $pid; wait $pid; rm -rf $data
