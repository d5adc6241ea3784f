-- Tenants: a queue belongs to a tenant (the NATS account its requests
-- arrive in; '' is the global tenant of a configuration without accounts),
-- and its name is unique within the tenant only. Adding a column with a
-- constant default rewrites nothing.
ALTER TABLE comb_queues ADD COLUMN tenant text NOT NULL DEFAULT '';
ALTER TABLE comb_queues DROP CONSTRAINT comb_queues_name_key;
ALTER TABLE comb_queues ADD CONSTRAINT comb_queues_tenant_name_key UNIQUE (tenant, name);
