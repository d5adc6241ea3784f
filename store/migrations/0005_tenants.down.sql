-- Fails when two tenants have a queue of one name: delete one first.
ALTER TABLE comb_queues DROP CONSTRAINT comb_queues_tenant_name_key;
ALTER TABLE comb_queues ADD CONSTRAINT comb_queues_name_key UNIQUE (name);
ALTER TABLE comb_queues DROP COLUMN tenant;
