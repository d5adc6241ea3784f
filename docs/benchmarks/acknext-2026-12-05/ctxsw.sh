#!/usr/bin/env bash
# docs/benchmarks/acknext-2026-12-05/ctxsw.sh COMB_BINARY [loadtest flags]: 1,000 single-message puts a second for 20 s on a fresh comb serve; the context switches a message (every thread, voluntary and not) of the broker, the loader and PostgreSQL from t=4 s to t=18 s
bin=$1; shift
data=$(mktemp -d); chmod 755 $data
$bin serve -data-dir $data -nats-listen 127.0.0.1:24222 -nats-http 0 -pg-port 25433 > $data/serve.log 2>&1 & pid=$!
for i in $(seq 100); do grep -q "comb ready" $data/serve.log 2>/dev/null && break; sleep 0.3; done
$bin loadtest -nats nats://127.0.0.1:24222 -target comb -rate 1000 -push-batch 1 -duration 20s -report=false -out $data/run "$@" > $data/run.out 2>&1 & lp=$!
sw() { cat $(for p in "$@"; do ls -d /proc/$p/task/*/status 2>/dev/null; done) 2>/dev/null | awk '/ctxt_switches/ {s+=$2} END {print s+0}'; }
sleep 4; pgs=$(pgrep -u postgres | tr '\n' ' ')
b0=$(sw $pid); l0=$(sw $lp); p0=$(sw $pgs); sleep 14; b1=$(sw $pid); l1=$(sw $lp); p1=$(sw $pgs)
wait $lp; kill -INT $pid; wait $pid
echo "$* : broker $(( (b1-b0)/14000 )).$(( (b1-b0)%14000*10/14000 )) loader $(( (l1-l0)/14000 )).$(( (l1-l0)%14000*10/14000 )) pg $(( (p1-p0)/14000 )).$(( (p1-p0)%14000*10/14000 )) | $(grep -E '^\[final' $data/run.out | grep -oE 'e2e p50[^|]*')"
rm -rf $data
