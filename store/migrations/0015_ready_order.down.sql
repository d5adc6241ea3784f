DROP INDEX comb_ready_queue;
CREATE INDEX comb_ready_queue ON comb_ready (queue_id, group_name);
