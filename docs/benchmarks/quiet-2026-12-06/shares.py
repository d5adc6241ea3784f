#!/usr/bin/env python3
"""Shares of a broker CPU profile by layer.

    go tool pprof -traces BINARY PROFILE | python3 shares.py

Each sampled stack goes to the first layer that appears anywhere in it, in
this order: pgx (statements to PostgreSQL, their socket writes and reads
included), the garbage collector's mark workers, the embedded NATS server,
the nats.go client the bridge uses, Comb's own code, and the rest of the
runtime (scheduler, timers, idle threads)."""
import collections
import re
import sys

LAYERS = [
    ("pgx", lambda s: "jackc/pgx" in s),
    ("GC mark", lambda s: "gcBgMarkWorker" in s or "gcDrain" in s),
    ("NATS server", lambda s: "nats-server" in s),
    ("nats.go client", lambda s: "nats%2ego" in s or "nats.go" in s),
    ("Comb's own code", lambda s: "combmq/comb" in s),
    ("other runtime", lambda s: True),
]


def ms(v):
    if v.endswith("ms"):
        return float(v[:-2])
    if v.endswith("s"):
        return float(v[:-1]) * 1000
    return 0.0


def main():
    text = sys.stdin.read()
    agg, total = collections.Counter(), 0.0
    for block in text.split("-----------+-------------------------------------------------------"):
        lines = [l for l in block.strip().split("\n") if l.strip()]
        if not lines:
            continue
        m = re.match(r"\s*([\d.]+m?s)\s+(\S+)", lines[0])
        if not m:
            continue
        t = ms(m.group(1))
        stack = " ".join([m.group(2)] + [l.strip() for l in lines[1:]])
        total += t
        for name, match in LAYERS:
            if match(stack):
                agg[name] += t
                break
    for name, _ in LAYERS:
        print(f"{agg[name] / total * 100:5.1f} %  {name}")
    print(f"{total / 1000:.2f} s of samples")


if __name__ == "__main__":
    main()
