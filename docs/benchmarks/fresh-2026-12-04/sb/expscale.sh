#!/bin/bash
sb=$1
B=/tmp/comb-new
su nobody -s /bin/bash -c "/usr/lib/postgresql/15/bin/pg_ctl -D /tmp/pgexp/d -l /tmp/pgexp/log -w -m fast stop" >/dev/null 2>&1
su nobody -s /bin/bash -c "/usr/lib/postgresql/15/bin/pg_ctl -D /tmp/pgexp/d -l /tmp/pgexp/log -w -o \"-p 25800 -k /tmp/pgexp -c listen_addresses=127.0.0.1 -c shared_buffers=$sb -c max_wal_size=4GB -c checkpoint_timeout=15min -c max_connections=200 -c wal_compression=lz4 -c backend_flush_after=512kB -c wal_init_zero=off -c autovacuum_work_mem=128MB\" start" >/dev/null
psql postgres://postgres@127.0.0.1:25800/postgres -qc "DROP DATABASE IF EXISTS comb" -qc "CREATE DATABASE comb" >/dev/null 2>&1
D=$(mktemp -d); chmod 755 $D
$B serve -data-dir $D -nats-listen 127.0.0.1:24222 -nats-http 0 -http 127.0.0.1:0 -postgres-url "postgres://postgres@127.0.0.1:25800/comb?sslmode=disable" > $D/serve.log 2>&1 &
pid=$!
for i in $(seq 150); do grep -q 'comb ready' $D/serve.log && break; sleep 0.2; done
echo "sb=$sb $(/tmp/scale -nats nats://127.0.0.1:24222 -postgres-url "postgres://postgres@127.0.0.1:25800/comb?sslmode=disable" -partitions 1000000 -ready-pct 1 -pops 300 -broker-pid $pid 2>&1 | tail -1)"
kill -INT $pid; wait $pid; rm -rf $D
