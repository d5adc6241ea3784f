ALTER TABLE comb_dead_letters DROP COLUMN error;
