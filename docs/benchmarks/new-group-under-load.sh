#!/usr/bin/env bash
# A new group from the oldest message on a queue whose partitions all
# retain messages, under load: a fresh `comb serve`, then two loader runs
# on one queue of 20,000 partitions (single-message pushes, 5,000 a
# second, 15 s, -verify): group g1 makes the partitions; then group g2,
# new, consumes the first run's messages (the verify counts them as
# foreign) and its own, while its making marks the ready set a window at
# a time (migration 0018). Last, each group's partitions still behind,
# those of them the ready set and the group's marking do not cover (the
# invariant of store/ready.go: always 0), and its pending messages.
#   docs/benchmarks/new-group-under-load.sh COMB_BINARY
# NATS_PORT and PG_PORT move the broker's ports (24222, 25433).
set -euo pipefail
bin=$(realpath "$1")
nats_port=${NATS_PORT:-24222}; pg_port=${PG_PORT:-25433}
data=$(mktemp -d -t comb-newgroup.XXXXXX); chmod 755 "$data"
"$bin" serve -data-dir "$data" -nats-listen 127.0.0.1:$nats_port -nats-http 0 -pg-port $pg_port >"$data/serve.log" 2>&1 &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 150); do grep -q 'comb ready' "$data/serve.log" && break; sleep 0.2; done
lt() {
	"$bin" loadtest -nats "nats://127.0.0.1:$nats_port" -target comb -queue newgroup -partitions 20000 \
		-push-batch 1 -rate 5000 -duration 15s -verify "$@" 2>&1 | grep -E '^\[(final|verify)'
}
echo "run 1, group g1 (makes the 20,000 partitions):"; lt -group g1
echo "run 2, group g2, new, from the oldest message:"; lt -group g2
export PGPASSFILE=$data/postgres/comb-password
echo "group | partitions behind | of them uncovered | pending messages:"
psql -h 127.0.0.1 -p "$pg_port" -U postgres -d comb -At <<'SQL'
SELECT g.name, count(*),
       count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM comb_ready r WHERE r.partition_id = p.id AND r.group_name IN (g.name, ''))
                        AND NOT (g.unmarked_after IS NOT NULL AND p.name > g.unmarked_after)),
       sum(p.next_offset - greatest(c.committed, p.low_offset))
FROM comb_groups g JOIN comb_partitions p ON p.queue_id = g.queue_id
LEFT JOIN comb_cursors c ON c.partition_id = p.id AND c.group_name = g.name
WHERE greatest(coalesce(c.committed, CASE WHEN g.from_end THEN p.next_offset END), p.low_offset) < p.next_offset
GROUP BY g.name ORDER BY g.name;
SQL
