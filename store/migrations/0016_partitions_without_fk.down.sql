DROP TRIGGER comb_queue_deleted ON comb_queues;
DROP FUNCTION comb_queue_deleted();
ALTER TABLE comb_partitions ADD CONSTRAINT comb_partitions_queue_id_fkey
    FOREIGN KEY (queue_id) REFERENCES comb_queues(id) ON DELETE CASCADE;
