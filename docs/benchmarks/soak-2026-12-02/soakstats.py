import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
t = [float(r['elapsed_s']) for r in rows]
rss = [float(r['broker_rss_mb']) for r in rows]
db = [float(r['db_size_mb']) for r in rows]
def win(a, b, xs):
    return [x for ti, x in zip(t, xs) if a <= ti < b]
for a, b in [(900, 1800), (1800, 2700), (2700, 3601)]:
    print(f"minutes {a//60}-{b//60}: rss median {statistics.median(win(a,b,rss)):.1f} MB, db median {statistics.median(win(a,b,db)):.0f} MB")
# slope of rss over the last 45 minutes, least squares
tt = [ti for ti in t if ti >= 900]; rr = win(900, 1e9, rss)
mt, mr = statistics.mean(tt), statistics.mean(rr)
slope = sum((a-mt)*(b-mr) for a, b in zip(tt, rr)) / sum((a-mt)**2 for a in tt)
print(f"rss slope over minutes 15-60: {slope*3600:.2f} MB/hour; median {statistics.median(rr):.1f}, min {min(rr):.1f}, max {max(rr):.1f}")
d = win(1200, 1e9, db); m = statistics.median(d)
print(f"db over the last 40 minutes: median {m:.0f} MB, min {100*(min(d)/m-1):+.1f} %, max {100*(max(d)/m-1):+.1f} %")
