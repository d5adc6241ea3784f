package bridge

import (
	"bytes"
)

// Wake-ups travel on "_COMB.<prefix>.wake.<queue>", so that a push on one
// bridge wakes long-polling pops on every bridge. The body says what may
// have become ready, one "<group>\t<partition>" line per target (names
// hold no control characters, so tab and newline are free); an empty
// group means every group. An empty body means anything in the queue.
//
// Targets keep a push from waking every waiting pop of a queue (a
// thundering herd of store calls, all but one finding nothing): for each
// group, a wake-up tries as many waiters as it names partitions, plus the
// waiters that asked for one of those partitions.

// maxWakeTargets bounds a wake-up's body; beyond it, the wake-up names no
// targets and tries every waiter of the queue.
const maxWakeTargets = 64

// wakeTarget is one thing a wake-up may have made ready: messages of
// partition for group ("" for every group).
type wakeTarget struct {
	group, partition string
}

// wakeSet gathers the wake-ups of one batch: one per queue.
type wakeSet struct {
	queues  []string
	targets map[string]map[wakeTarget]struct{} // nil map: everything
}

// add notes that partition of queue may have messages ready for group.
func (w *wakeSet) add(queue, group, partition string) {
	if w.targets == nil {
		w.targets = map[string]map[wakeTarget]struct{}{}
	}
	t, seen := w.targets[queue]
	if !seen {
		w.queues = append(w.queues, queue)
		t = map[wakeTarget]struct{}{}
		w.targets[queue] = t
	}
	if t == nil || len(t) > maxWakeTargets {
		return
	}
	t[wakeTarget{group, partition}] = struct{}{}
}

// addAll notes that anything in queue may be ready.
func (w *wakeSet) addAll(queue string) {
	if w.targets == nil {
		w.targets = map[string]map[wakeTarget]struct{}{}
	}
	if _, seen := w.targets[queue]; !seen {
		w.queues = append(w.queues, queue)
	}
	w.targets[queue] = nil
}

// publish sends the set's wake-ups.
func (b *Bridge) publishWakes(w *wakeSet) {
	for _, q := range w.queues {
		if err := b.nc.Publish(b.wakePrefix+q, encodeWake(w.targets[q])); err != nil {
			b.log.Warn("publish wake-up", "queue", q, "err", err)
		}
	}
}

// wakeAll publishes a wake-up for anything in queue.
func (b *Bridge) wakeAll(queue string) {
	var w wakeSet
	w.addAll(queue)
	b.publishWakes(&w)
}

func encodeWake(targets map[wakeTarget]struct{}) []byte {
	if len(targets) == 0 || len(targets) > maxWakeTargets {
		return nil
	}
	var b []byte
	for t := range targets {
		b = append(b, t.group...)
		b = append(b, '\t')
		b = append(b, t.partition...)
		b = append(b, '\n')
	}
	return b
}

// decodeWake returns a wake-up's targets, or nil for everything (also for
// a body it cannot read: waking too much is only wasteful).
func decodeWake(body []byte) []wakeTarget {
	var out []wakeTarget
	for len(body) > 0 && len(out) <= maxWakeTargets {
		line, rest, _ := bytes.Cut(body, []byte{'\n'})
		body = rest
		g, p, ok := bytes.Cut(line, []byte{'\t'})
		if !ok || len(p) == 0 {
			return nil
		}
		out = append(out, wakeTarget{string(g), string(p)})
	}
	if len(out) > maxWakeTargets {
		return nil
	}
	return out
}
