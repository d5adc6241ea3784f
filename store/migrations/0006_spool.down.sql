DROP TABLE comb_spool_applied;
