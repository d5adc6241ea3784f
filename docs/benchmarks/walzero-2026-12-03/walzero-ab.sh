#!/bin/bash
# walzero-ab.sh ROUNDS VARIANT...: the open loop at 80k msg/s against a fresh
# external PostgreSQL 15 cluster per run, with the private cluster's settings
# plus each variant's (quoted "k=v k=v" postgres -c settings; "base" for
# none), alternating. Runs as root, the cluster as nobody, under /tmp/wz;
# BIN is the comb binary (the runs of 2026-12-03 used d61fe92).
#   BIN=./comb walzero-ab.sh 2 base "wal_init_zero=off"
B=${BIN:?set BIN to a comb binary}
mkdir -p /tmp/wz && chmod 777 /tmp/wz
rounds=$1; shift
for i in $(seq $rounds); do for v in "$@"; do
  d=/tmp/wz/d; rm -rf $d; mkdir -p $d; chown nobody $d
  su nobody -s /bin/bash -c "/usr/lib/postgresql/15/bin/initdb -D $d/pg -U postgres -A trust >/dev/null"
  extra=""; [ "$v" != base ] && for kv in $v; do extra="$extra -c $kv"; done
  su nobody -s /bin/bash -c "/usr/lib/postgresql/15/bin/pg_ctl -D $d/pg -l $d/pg.log -w -o '-p 25800 -k /tmp/wz -c listen_addresses=127.0.0.1 -c shared_buffers=256MB -c max_wal_size=4GB -c checkpoint_timeout=15min -c max_connections=200 -c wal_compression=lz4 -c backend_flush_after=512kB -c autovacuum_work_mem=128MB $extra' start" >/dev/null
  psql -qX postgres://postgres@127.0.0.1:25800/postgres -c "CREATE DATABASE comb" >/dev/null
  sd=$(mktemp -d -t wzs.XXXXXX)
  $B serve -data-dir $sd -nats-listen 127.0.0.1:24222 -nats-http 0 -postgres-url "postgres://postgres@127.0.0.1:25800/comb?sslmode=disable" > $sd/serve.log 2>&1 & pid=$!
  for _ in $(seq 150); do grep -q 'comb ready' $sd/serve.log && break; sleep 0.2; done
  $B loadtest -nats nats://127.0.0.1:24222 -postgres-url "postgres://postgres@127.0.0.1:25800/comb?sslmode=disable" -rate 80000 -pop-partitions 4 -pop-batch 400 -duration 60s -verify -report=false -interval 10s -out $sd/run > $sd/run.out 2>&1
  kill -INT $pid; wait $pid
  p=$(python3 -c "import csv; r=list(csv.DictReader(open('$sd/run/samples.csv'))); print([round(float(x['e2e_p99_ms'])) for x in r])")
  echo "[$v] run $i: $(grep '^\[final' $sd/run.out | sed 's/.*e2e p50 \([0-9.]*ms\) p99 \([0-9.]*ms\) p99.9 \([0-9.]*ms\).*/p50 \1 p99 \2 p99.9 \3/') | $(grep '^\[resources' $sd/run.out | sed 's/.*cpu broker \([0-9.]*\) loader \([0-9.]*\) postgres \([0-9.]*\).*/broker \1 pg \3/') | verify ok=$(grep -c 'verify comb\] OK' $sd/run.out) | walfiles $(ls $d/pg/pg_wal | wc -l)"
  echo "  p99/s $p"
  su nobody -s /bin/bash -c "/usr/lib/postgresql/15/bin/pg_ctl -D $d/pg -w -m fast stop" >/dev/null
  rm -rf $sd
done; done
