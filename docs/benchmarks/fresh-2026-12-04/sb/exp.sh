#!/bin/bash
# One run on an external cluster with the private cluster's settings
# (pgcluster.DurableSettings) but shared_buffers SB, as run on 2026-12-04:
#   exp.sh SB TAG                 open loop at 80k msg/s, 60 s, with nr_dirty once a second
#   LFLAGS="-mode closed -pacers 64 -pop-partitions 4 -pop-batch 400 -duration 30s" exp.sh SB TAG
#   SCALE=1 exp.sh SB             docs/benchmarks/scale at a million partitions
# B is the comb binary, SCALE_BIN the scale tool's; the cluster is
# /tmp/pgexp/d (initdb'd beforehand), run by nobody on port 25800.
sb=$1 tag=${2:-scale}
B=${B:-/tmp/comb-new}
: "${LFLAGS:=-rate 80000 -pop-partitions 4 -pop-batch 400 -duration 60s}"
su nobody -s /bin/bash -c "/usr/lib/postgresql/15/bin/pg_ctl -D /tmp/pgexp/d -l /tmp/pgexp/log -w -m fast stop" >/dev/null 2>&1
su nobody -s /bin/bash -c "/usr/lib/postgresql/15/bin/pg_ctl -D /tmp/pgexp/d -l /tmp/pgexp/log -w -o \"-p 25800 -k /tmp/pgexp -c listen_addresses=127.0.0.1 -c shared_buffers=$sb -c max_wal_size=4GB -c checkpoint_timeout=15min -c max_connections=200 -c wal_compression=lz4 -c backend_flush_after=512kB -c wal_init_zero=off -c autovacuum_work_mem=128MB\" start" >/dev/null
psql postgres://postgres@127.0.0.1:25800/postgres -qc "DROP DATABASE IF EXISTS comb" -qc "CREATE DATABASE comb" >/dev/null 2>&1
url="postgres://postgres@127.0.0.1:25800/comb?sslmode=disable"
D=$(mktemp -d); chmod 755 $D
$B serve -data-dir $D -nats-listen 127.0.0.1:24222 -nats-http 0 -http 127.0.0.1:0 -postgres-url "$url" > $D/serve.log 2>&1 &
pid=$!
for i in $(seq 150); do grep -q 'comb ready' $D/serve.log && break; sleep 0.2; done
if [ -n "${SCALE:-}" ]; then
	echo "sb=$sb $(${SCALE_BIN:-/tmp/scale} -nats nats://127.0.0.1:24222 -postgres-url "$url" -partitions 1000000 -ready-pct 1 -pops 300 -broker-pid $pid 2>&1 | tail -1)"
	kill -INT $pid; wait $pid; rm -rf $D
	exit
fi
(for i in $(seq 65); do awk '/^nr_dirty /{print $2}' /proc/vmstat; sleep 1; done > /tmp/exp-$tag.dirty) &
$B loadtest -nats nats://127.0.0.1:24222 -postgres-url "$url" $LFLAGS -verify -report=false -out /tmp/exp-$tag > /tmp/exp-$tag.out 2>&1
kill -INT $pid; wait $pid
sleep 6
f=/tmp/exp-$tag/samples.csv; col=$(head -1 $f | tr ',' '\n' | grep -n '^e2e_p99_ms$' | cut -d: -f1)
echo "$tag sb=$sb $(grep -E '^\[final' /tmp/exp-$tag.out | sed -E 's/.*(e2e p50[^|]*).*/\1/') $(grep -E '^\[verify' /tmp/exp-$tag.out | cut -c1-30)"
echo "  p99/s: $(awk -F, -v c=$col 'NR>1 {printf "%.0f ", $c}' $f)"
echo "  dirty MB: $(awk '{printf "%.0f ", $1*4/1024}' /tmp/exp-$tag.dirty)"
rm -rf $D
