DROP TABLE comb_ready;
