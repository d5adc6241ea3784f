package bridge

import (
	"bytes"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/combmq/comb/domain"
)

// Wake-ups travel on "_COMB.<prefix>.wake.<queue>" for the global tenant
// and on "_COMB.<prefix>.twake.<tenant>.<queue>" for the others, the
// tenant in unpadded base64url (an account name may hold any character, a
// queue name dots), so that a push on one bridge wakes long-polling pops
// on every bridge. They run on the bridge's own connection, never in a
// tenant's account. The body says what may
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
	queues  []domain.QueueRef
	targets map[domain.QueueRef]map[wakeTarget]struct{} // nil map: everything
	counts  map[domain.QueueRef]int                     // messages made ready, when known
}

// addCount notes that n more messages of queue are ready for every group.
// A wake-up that knows its count retries, per group, only as many waiters
// as it takes to fill their pops' max with that many messages: at a high
// rate a push wakes one or two pops, not every waiting consumer (most of
// whom would find nothing, each for a store query).
func (w *wakeSet) addCount(queue domain.QueueRef, n int) {
	if w.counts == nil {
		w.counts = map[domain.QueueRef]int{}
	}
	w.counts[queue] += n
}

// add notes that partition of queue may have messages ready for group.
func (w *wakeSet) add(queue domain.QueueRef, group, partition string) {
	if w.targets == nil {
		w.targets = map[domain.QueueRef]map[wakeTarget]struct{}{}
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
func (w *wakeSet) addAll(queue domain.QueueRef) {
	if w.targets == nil {
		w.targets = map[domain.QueueRef]map[wakeTarget]struct{}{}
	}
	if _, seen := w.targets[queue]; !seen {
		w.queues = append(w.queues, queue)
	}
	w.targets[queue] = nil
}

// wakeSubject is the subject of queue's wake-ups.
func (b *Bridge) wakeSubject(q domain.QueueRef) string {
	if q.Tenant == "" {
		return b.wakePrefix + q.Name
	}
	return b.tenantWakePrefix + base64.RawURLEncoding.EncodeToString([]byte(q.Tenant)) + "." + q.Name
}

// wakeQueue is the queue of a wake-up's subject; ok is false for a subject
// that no bridge sends.
func (b *Bridge) wakeQueue(subject string) (q domain.QueueRef, ok bool) {
	if name, found := strings.CutPrefix(subject, b.wakePrefix); found {
		return domain.Global(name), name != ""
	}
	rest, found := strings.CutPrefix(subject, b.tenantWakePrefix)
	if !found {
		return q, false
	}
	enc, name, found := strings.Cut(rest, ".")
	t, err := base64.RawURLEncoding.DecodeString(enc)
	if !found || err != nil || len(t) == 0 || name == "" {
		return q, false
	}
	return domain.QueueRef{Tenant: string(t), Name: name}, true
}

// publish sends the set's wake-ups.
func (b *Bridge) publishWakes(w *wakeSet) {
	for _, q := range w.queues {
		if err := b.nc.Publish(b.wakeSubject(q), encodeWake(w.targets[q], w.counts[q])); err != nil {
			b.log.Warn("publish wake-up", "queue", q, "err", err)
		}
	}
}

// publishWakesAfter sends the set's wake-ups d from now, unless the bridge
// has stopped by then: for messages that become ready later (a queue's
// delay_ms, a retry's hold) without any request to say so. Should this
// bridge stop first, waiting pops find them on their retry interval.
func (b *Bridge) publishWakesAfter(d time.Duration, w *wakeSet) {
	time.AfterFunc(d, func() {
		select {
		case <-b.quit:
		default:
			b.publishWakes(w)
		}
	})
}

// wakeAll publishes a wake-up for anything in queue.
func (b *Bridge) wakeAll(queue domain.QueueRef) {
	var w wakeSet
	w.addAll(queue)
	b.publishWakes(&w)
}

// wakeReread publishes a wake-up for anything in queue that also tells
// every bridge to read group's row anew (Store.Reread): a seek changed
// it, and a bridge that trusts what it saw of it within its cache's TTL
// would look for the group's messages where they were before.
func (b *Bridge) wakeReread(queue domain.QueueRef, group string) {
	if err := b.nc.Publish(b.wakeSubject(queue), encodeReread(group)); err != nil {
		b.log.Warn("publish wake-up", "queue", queue, "err", err)
	}
}

// encodeReread is the body of wakeReread's wake-up: "!<group>\n". No
// other body starts with '!' ('#' leads a count, and a target line holds a
// tab), and a bridge that cannot read it wakes everything, as for any
// body it cannot read.
func encodeReread(group string) []byte {
	return append(append([]byte{'!'}, group...), '\n')
}

// decodeReread returns the group of a wake-up that encodeReread made.
func decodeReread(body []byte) (group string, ok bool) {
	g, found := bytes.CutPrefix(body, []byte{'!'})
	if !found {
		return "", false
	}
	g, found = bytes.CutSuffix(g, []byte{'\n'})
	if !found || bytes.ContainsAny(g, "\n\t") {
		return "", false
	}
	return string(g), true
}

func encodeWake(targets map[wakeTarget]struct{}, count int) []byte {
	var b []byte
	if count > 0 {
		// "#<count>" leads the body: group and partition names never
		// start a line with '#' followed only by digits and a newline,
		// as a target line always holds a tab.
		b = append(b, '#')
		b = strconv.AppendInt(b, int64(count), 10)
		b = append(b, '\n')
	}
	if len(targets) == 0 || len(targets) > maxWakeTargets {
		return b
	}
	for t := range targets {
		b = append(b, t.group...)
		b = append(b, '\t')
		b = append(b, t.partition...)
		b = append(b, '\n')
	}
	return b
}

// decodeWake returns a wake-up's targets, or nil for everything (also for
// a body it cannot read: waking too much is only wasteful), and the number
// of messages it made ready (0: unknown).
func decodeWake(body []byte) ([]wakeTarget, int) {
	count := 0
	if len(body) > 0 && body[0] == '#' {
		line, rest, _ := bytes.Cut(body[1:], []byte{'\n'})
		n, err := strconv.Atoi(string(line))
		if err != nil || n < 0 {
			return nil, 0
		}
		count, body = n, rest
	}
	return decodeTargets(body), count
}

func decodeTargets(body []byte) []wakeTarget {
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
