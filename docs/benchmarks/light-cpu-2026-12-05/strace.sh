#!/usr/bin/env bash
# docs/benchmarks/light-cpu-2026-12-05/strace.sh COMB_BINARY OUTDIR: light load 20 s; strace -c of the broker for 5 s from t=6 s
set -euo pipefail
bin=$1 out=$2
mkdir -p $out
data=$(mktemp -d -t comb-prof.XXXXXX); chmod 755 $data
$bin serve -data-dir $data -nats-listen 127.0.0.1:24222 -nats-http 0 -pg-port 25433 > $out/serve.log 2>&1 &
pid=$!
for i in $(seq 100); do grep -q "comb ready" $out/serve.log 2>/dev/null && break; sleep 0.3; done
$bin loadtest -nats nats://127.0.0.1:24222 -target comb -rate 1000 -push-batch 1 -duration 20s -report=false -out $out/run > $out/run.out 2>&1 &
lpid=$!
sleep 6
timeout -s INT 5 strace -f -c -p $pid -o $out/strace.txt || true
wait $lpid || true
kill -INT $pid; wait $pid || true
rm -rf $data
grep -E '^\[(final)' $out/run.out | cut -c1-250
head -20 $out/strace.txt
