#!/bin/bash
# usage: exp.sh SB tag
sb=$1 tag=$2
B=/tmp/comb-new
su nobody -s /bin/bash -c "/usr/lib/postgresql/15/bin/pg_ctl -D /tmp/pgexp/d -l /tmp/pgexp/log -w -m fast stop" >/dev/null 2>&1
su nobody -s /bin/bash -c "/usr/lib/postgresql/15/bin/pg_ctl -D /tmp/pgexp/d -l /tmp/pgexp/log -w -o \"-p 25800 -k /tmp/pgexp -c listen_addresses=127.0.0.1 -c shared_buffers=$sb -c max_wal_size=4GB -c checkpoint_timeout=15min -c max_connections=200 -c wal_compression=lz4 -c backend_flush_after=512kB -c wal_init_zero=off -c autovacuum_work_mem=128MB\" start" >/dev/null
psql postgres://postgres@127.0.0.1:25800/postgres -qc "DROP DATABASE IF EXISTS comb" -qc "CREATE DATABASE comb" >/dev/null 2>&1
D=$(mktemp -d); chmod 755 $D
$B serve -data-dir $D -nats-listen 127.0.0.1:24222 -nats-http 0 -http 127.0.0.1:0 -postgres-url "postgres://postgres@127.0.0.1:25800/comb?sslmode=disable" > $D/serve.log 2>&1 &
pid=$!
for i in $(seq 150); do grep -q 'comb ready' $D/serve.log && break; sleep 0.2; done
(for i in $(seq 65); do awk '/^nr_dirty /{print $2}' /proc/vmstat; sleep 1; done > /tmp/exp-$tag.dirty) &
$B loadtest -nats nats://127.0.0.1:24222 -postgres-url "postgres://postgres@127.0.0.1:25800/comb?sslmode=disable" -rate 80000 -pop-partitions 4 -pop-batch 400 -duration 60s -verify -report=false -out /tmp/exp-$tag > /tmp/exp-$tag.out 2>&1
kill -INT $pid; wait $pid
sleep 6
f=/tmp/exp-$tag/samples.csv; col=$(head -1 $f | tr ',' '\n' | grep -n '^e2e_p99_ms$' | cut -d: -f1)
echo "$tag sb=$sb $(grep -E '^\[final' /tmp/exp-$tag.out | sed -E 's/.*(e2e p50[^|]*).*/\1/') $(grep -E '^\[verify' /tmp/exp-$tag.out | cut -c1-30)"
echo "  p99/s: $(awk -F, -v c=$col 'NR>1 {printf "%.0f ", $c}' $f)"
echo "  dirty MB: $(awk '{printf "%.0f ", $1*4/1024}' /tmp/exp-$tag.dirty)"
