-- The error text an ack gave when it dead-lettered a message ("failed" or
-- "dead" with "error"); '' when it gave none, and for older dead letters.
ALTER TABLE comb_dead_letters ADD COLUMN error text NOT NULL DEFAULT '';
