#!/usr/bin/env bash
# docs/benchmarks/light-floor-2026-12-05/sched.sh COMB_BINARY OUTDIR: 1,000 single-message puts a second for 20 s; perf record -g of the broker's sched_wakeup and sched_switch events for 5 s from t=6 s (5,000 messages). Then: perf script -i OUTDIR/perf.data > OUTDIR/script.txt; python3 sched.py OUTDIR/script.txt 5000
bin=$1 out=$2; mkdir -p $out
data=$(mktemp -d); chmod 755 $data
$bin serve -data-dir $data -nats-listen 127.0.0.1:24222 -nats-http 0 -pg-port 25433 > $data/serve.log 2>&1 & pid=$!
for i in $(seq 100); do grep -q "comb ready" $data/serve.log 2>/dev/null && break; sleep 0.3; done
$bin loadtest -nats nats://127.0.0.1:24222 -target comb -rate 1000 -push-batch 1 -duration 20s -report=false -out $data/run > $data/run.out 2>&1 & lp=$!
sleep 6
perf record -e sched:sched_wakeup,sched:sched_switch -g -o $out/perf.data -p $pid -- sleep 5 >/dev/null 2>&1
wait $lp; grep -E "^\[final" $data/run.out | cut -c1-250
kill -INT $pid; wait $pid; rm -rf $data
