-- A partition's queue is no longer checked by a foreign key as the
-- partition is made: the check, one query and a lock on the queue's row
-- for every row inserted, was a fifth of the time PostgreSQL took to make
-- a partition (docs/benchmarks.md, "Making partitions"). Every statement
-- that makes partitions takes the queue row's lock FOR KEY SHARE first and
-- inserts only for a queue still there (store/members.go, store/fresh.go);
-- a queue's delete takes it FOR UPDATE first. Deleting a queue still
-- deletes its partitions, by the trigger below, as the cascade did, for a
-- broker of any version.
ALTER TABLE comb_partitions DROP CONSTRAINT comb_partitions_queue_id_fkey;

CREATE FUNCTION comb_queue_deleted() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM comb_partitions WHERE queue_id = OLD.id;
    RETURN NULL;
END $$;

CREATE TRIGGER comb_queue_deleted AFTER DELETE ON comb_queues
FOR EACH ROW EXECUTE FUNCTION comb_queue_deleted();
