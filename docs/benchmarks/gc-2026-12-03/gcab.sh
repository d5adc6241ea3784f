#!/bin/bash
# gcab.sh RUNS DURATION GOGC...: the broker under each GOGC in turn, alternating, a fresh broker and
# PostgreSQL each run; the loader shape is the closed-loop reference unless FLAGS gives another.
runs=$1 dur=$2; shift 2
for i in $(seq $runs); do for g in "$@"; do
  d=$(mktemp -d -t gcab.XXXXXX); chmod 755 $d
  GOGC=$g ./comb serve -data-dir $d -nats-listen 127.0.0.1:24222 -nats-http 0 -pg-port 25433 > $d/serve.log 2>&1 &
  pid=$!
  for _ in $(seq 150); do grep -q 'comb ready' $d/serve.log && break; sleep 0.2; done
  ./comb loadtest -nats nats://127.0.0.1:24222 -postgres-url "postgres://postgres@127.0.0.1:25433/comb?sslmode=disable&passfile=$d/postgres/comb-password" ${FLAGS:--mode closed -pacers 64 -pop-partitions 4 -pop-batch 400} -duration $dur -verify -report=false -out $d/run > $d/run.out 2>&1
  kill -INT $pid; wait $pid
  rate=$(grep '^\[final' $d/run.out | sed 's/.*avg \([0-9]*\) in.*/\1/'); cpu=$(grep '^\[resources' $d/run.out | sed 's/.*cpu broker \([0-9.]*\) loader \([0-9.]*\) postgres \([0-9.]*\).*/\1 \2 \3/'); p99=$(grep "^\[final" $d/run.out | sed "s/.*e2e p50 \([0-9.]*ms\) p99 \([0-9.]*ms\).*/p50 \1 p99 \2/"); rss=$(grep '^\[resources' $d/run.out | sed 's/.*rss median \([0-9]*\) MB max \([0-9]*\).*/\1 \2/')
  v=$(grep -c '^\[verify comb\] OK' $d/run.out)
  echo "GOGC=$g run $i: $rate msg/s | cpu broker/loader/pg $cpu | broker us/msg $(python3 -c "print(round(${cpu%% *}/$rate*1e6,2))") | rss median/max $rss MB | e2e $p99 | verify ok=$v"
  rm -rf $d
done; done
