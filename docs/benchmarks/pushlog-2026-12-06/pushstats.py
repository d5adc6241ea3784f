#!/usr/bin/env python3
"""Reads `comb loadtest -push-log` files (pushes.csv) and prints, per
group of files: the loader's lateness, the medians of the pushes' round
trips by where in its second each push was due (tenths), and the slowest
pushes taken apart.

    python3 pushstats.py LABEL=GLOB [LABEL=GLOB ...]
e.g. python3 pushstats.py before='pushes-pb100-run-771df31-*.csv' after='pushes-pb100-run-f7522a8-*.csv'
"""
import collections
import csv
import glob
import statistics
import sys


def main():
    for arg in sys.argv[1:]:
        label, pattern = arg.split("=", 1)
        by_tenth = collections.defaultdict(list)
        lag, rows = [], []
        for path in sorted(glob.glob(pattern)):
            for r in csv.DictReader(open(path)):
                due, sent = float(r["due_ms"]), float(r["sent_ms"])
                answered, first, last = float(r["answered_ms"]), float(r["e2e_first_ms"]), float(r["e2e_last_ms"])
                by_tenth[round((due % 1000) / 100) % 10].append(answered - sent)
                lag.append(sent)
                rows.append((last, sent, answered - sent, first - answered, due / 1000, path))
        rows.sort(reverse=True)
        print(f"{label}: {len(rows)} pushes, the loader's lateness (sent_ms) median {statistics.median(lag):.2f} ms")
        print("  round trip median by tenth of the second the push was due:")
        print("   " + "  ".join(f"x.{k}s {statistics.median(v):.2f}" for k, v in sorted(by_tenth.items())))
        print("  slowest pushes: e2e of the last message = lateness + round trip + delivered after the answer")
        for last, sent, rtt, after, due, path in rows[:8]:
            print(f"   {path.rsplit('/', 1)[-1]} due {due:6.2f}s: {last:.2f} = {sent:.2f} + {rtt:.2f} {after:+.2f} ms")


if __name__ == "__main__":
    main()
