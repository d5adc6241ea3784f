#!/bin/bash
# 10-minute run at a steady rate with completed_retention_s=60, then 4 minutes
# of sampling after the load stops: database size and retained messages.
pkill -INT -f " serve -data-dir /tmp/ab" ; sleep 3
rm -rf /tmp/ab; mkdir -p /tmp/ab
(cd /tmp/ab && /tmp/comb serve -data-dir /tmp/ab/data > /tmp/ab/serve.log 2>&1 &)
for i in $(seq 1 60); do grep -q "comb ready" /tmp/ab/serve.log && break; sleep 0.5; done
# The private cluster wants its password: pgx and psql read it from the file.
PG='postgres://postgres@127.0.0.1:5433/comb?sslmode=disable&passfile=/tmp/ab/data/postgres/comb-password'
name=retention-10m
echo "+ comb loadtest -queue $name -postgres-url $PG -rate 20000 -completed-retention 60s -duration 600s -verify -pop-partitions 4 -pop-batch 400" > /work/out/$name.out
/tmp/comb loadtest -queue $name -postgres-url "$PG" -rate 20000 -completed-retention 60s -duration 600s -verify -pop-partitions 4 -pop-batch 400 -out /work/out/$name >> /work/out/$name.out 2>&1
echo "elapsed_after_load_s,db_size_mb,segments_mb,retained_messages" > /work/out/$name-after.csv
for i in $(seq 0 5 240); do
  row=$(psql "$PG" -Atc "select round(pg_database_size(current_database())/1048576.0,1), round(pg_total_relation_size('comb_segments')/1048576.0,1), (select coalesce(sum(next_offset-low_offset),0) from comb_partitions)" | tr '|' ',')
  echo "$i,$row" >> /work/out/$name-after.csv
  sleep 5
done
pkill -INT -f " serve -data-dir /tmp/ab"; sleep 3
echo RETENTION-DONE
