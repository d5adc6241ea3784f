# sched.py SCRIPT.txt MESSAGES: from `perf script` of sched.sh's perf.data, the wake-ups the broker's threads caused (by woken process, kind, first Go frame and first non-runtime frame) and the times they went to sleep (by first Go frame), per message; then the sleeps by their runtime stack
import collections, sys
ev=[];cur=None
for line in open(sys.argv[1]):
    if not line.strip():
        if cur: ev.append(cur)
        cur=None; continue
    if not line.startswith('\t'):
        cur={'hdr':line.strip(),'st':[]}
    else:
        parts=line.strip().split(None,1)
        if len(parts)==2: cur['st'].append(parts[1].split('+')[0].split(' (')[0])
if cur: ev.append(cur)
def gofr(st, skip_runtime=True):
    fr=[f for f in st if not f.startswith('ffff') and '.' in f and not f.startswith(('__','do_','entry','x64','ttwu','try_','hrtimer','sched','futex','ep_','sock','tcp','ip_','net_','dev_','__x64'))]
    rt=[f for f in fr if f.startswith(('runtime.','internal/runtime','syscall.','internal/poll','net.','internal/'))]
    app=[f for f in fr if f not in rt]
    return (fr[0] if fr else '?'), (app[0] if app else '-')
wk=collections.Counter(); sw=collections.Counter()
for e in ev:
    h=e['hdr']
    if 'sched_wakeup' in h:
        wakee=h.split('comm=')[1].split()[0]
        k=gofr(e['st'])
        kern='timer' if any('hrtimer_wakeup' in f for f in e['st']) else ('net' if any(f.startswith(('tcp_','sock_def','unix_')) for f in e['st']) else ('futex' if any('futex_wake' in f for f in e['st']) else 'other'))
        wk[(wakee,kern,k[0],k[1])]+=1
    elif 'sched_switch' in h:
        k=gofr(e['st'])
        sw[k]+=1
n=int(sys.argv[2])
print("WAKEUPS per msg:", sum(wk.values())/n)
for k,v in wk.most_common(25): print(f"{v/n:5.2f}", k)
print("SWITCHES (sleep) per msg:", sum(sw.values())/n)
for k,v in sw.most_common(15): print(f"{v/n:5.2f}", k)
c=collections.Counter()
for e in ev:
    if 'sched_switch' in e['hdr']:
        st=[f for f in e['st'] if f.startswith(('runtime.','internal/runtime'))]
        if st and st[0].startswith(('runtime.usleep','runtime.futex','runtime.osyield')):
            c[tuple(st[:5])]+=1
print("SLEEPS in the runtime, by stack, per msg:")
for k,v in c.most_common(10): print(f"{v/n:5.2f}", ' < '.join(k))
