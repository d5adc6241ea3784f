package bridge

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

// Quota is what one tenant may use. A zero field is no limit. Over a
// limit a request is answered 429 with Comb-Retry-After-Ms and stores
// nothing.
type Quota struct {
	// MaxQueues is the most queues the tenant may have; a push or
	// configure that would create one more is refused. The store counts
	// them, exactly, across every bridge.
	MaxQueues int64
	// MaxBytes is the most message bytes the tenant's queues may retain.
	// The bridge reads the figure from PostgreSQL every QuotaRefresh and
	// adds what it has taken since, so one bridge never stores past it;
	// several bridges may overshoot by what the others took within one
	// refresh.
	MaxBytes int64
	// PushRate and PushBytesRate are the most messages and bytes per
	// second the tenant may push through this bridge: token buckets that
	// hold one second's worth, so a burst spends what the quiet before it
	// saved and no more.
	PushRate      float64
	PushBytesRate float64
	// MaxWaitingPops is the most long-polling pops (wait_ms > 0) the
	// tenant may hold on this bridge at once.
	MaxWaitingPops int64
}

// Quotas are the tenants' quotas: Default for every tenant that Tenants
// does not name. A tenant's entry replaces Default whole.
type Quotas struct {
	Default Quota
	Tenants map[string]Quota
}

// Of returns tenant's quota.
func (q Quotas) Of(tenant string) Quota {
	if t, ok := q.Tenants[tenant]; ok {
		return t
	}
	return q.Default
}

// validate reports negative limits, by the file's key names.
func (q Quotas) validate() error {
	var errs []error
	check := func(who string, x Quota) {
		for _, f := range []struct {
			key string
			v   float64
		}{
			{"max_queues", float64(x.MaxQueues)}, {"max_bytes", float64(x.MaxBytes)},
			{"max_push_rate", x.PushRate}, {"max_push_bytes_rate", x.PushBytesRate},
			{"max_waiting_pops", float64(x.MaxWaitingPops)},
		} {
			if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
				errs = append(errs, fmt.Errorf("tenant_limits %s %s %v: must be a number, 0 (no limit) or more", who, f.key, f.v))
			}
		}
	}
	check("default", q.Default)
	for name, x := range q.Tenants {
		check(name, x)
	}
	return errors.Join(errs...)
}

// DefaultQuotaRefresh is how often a bridge reads the retained bytes of
// the tenants that have MaxBytes, unless Config.QuotaRefresh says.
const DefaultQuotaRefresh = time.Second

// waitingRetryAfter is the hint of a pop refused by MaxWaitingPops: the
// earliest a parked pop may have gone is unknown, and a retry interval is
// when parked pops try again anyway.
const waitingRetryAfter = time.Second

// quota is one tenant's quota as this bridge keeps it.
type quota struct {
	Quota
	msgs, bytes *rate.Limiter // nil without the rate

	// Retained bytes, with MaxBytes: at the last refresh PostgreSQL held
	// base bytes, and done bytes of pushes had been answered then. Bytes
	// taken since, and those in flight then, are taken - baseDone: the
	// estimate errs high, never low.
	mu       sync.Mutex
	base     int64
	baseDone int64
	taken    atomic.Int64 // bytes of pushes admitted, ever
	done     atomic.Int64 // of those, answered

	longPolls atomic.Int64 // long-polling pops held
}

func newQuota(q Quota) *quota {
	out := &quota{Quota: q}
	if q.PushRate > 0 {
		out.msgs = rate.NewLimiter(rate.Limit(q.PushRate), burst(q.PushRate))
	}
	if q.PushBytesRate > 0 {
		out.bytes = rate.NewLimiter(rate.Limit(q.PushBytesRate), burst(q.PushBytesRate))
	}
	return out
}

// burst is a bucket of one second's worth, at least one.
func burst(perSecond float64) int {
	return max(1, int(math.Min(math.Ceil(perSecond), math.MaxInt32)))
}

// admitPush takes a push of msgs against the rates and the retained
// bytes, or refuses it with a 429 that says when to retry. A push it
// takes holds its bytes until pushDone.
func (q *quota) admitPush(msgs []domain.PushMessage, now time.Time) (int64, error) {
	if q.msgs == nil && q.bytes == nil && q.MaxBytes == 0 {
		return 0, nil // no quota on pushes: nothing to count
	}
	n := len(msgs)
	var size int64
	for i := range msgs {
		size += int64(msgs[i].Size())
	}
	var held []*rate.Reservation
	undo := func() {
		for _, r := range held {
			r.CancelAt(now)
		}
	}
	for _, b := range []struct {
		lim  *rate.Limiter
		n    int
		what string
	}{{q.msgs, n, "messages"}, {q.bytes, int(min(size, math.MaxInt32)), "bytes"}} {
		if b.lim == nil {
			continue
		}
		r := b.lim.ReserveN(now, b.n)
		if !r.OK() {
			undo()
			return 0, &protocol.Error{Code: protocol.CodeTooMany, RetryAfterMS: 1000, Message: fmt.Sprintf(
				"the push has %d %s, more than the tenant may push in one second (%d); split it", b.n, b.what, b.lim.Burst())}
		}
		held = append(held, r)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			held = held[:len(held)-1]
			undo()
			return 0, &protocol.Error{Code: protocol.CodeTooMany, RetryAfterMS: ceilMS(d), Message: fmt.Sprintf(
				"the tenant's push rate of %g %s per second is reached", b.lim.Limit(), b.what)}
		}
	}
	if q.MaxBytes > 0 {
		q.mu.Lock()
		est := q.base + q.taken.Load() - q.baseDone
		if est+size > q.MaxBytes {
			q.mu.Unlock()
			undo()
			return 0, &protocol.Error{Code: protocol.CodeTooMany, RetryAfterMS: ceilMS(DefaultQuotaRefresh), Message: fmt.Sprintf(
				"the tenant retains %d bytes; its max_bytes is %d", est, q.MaxBytes)}
		}
		q.taken.Add(size)
		q.mu.Unlock()
	}
	return size, nil
}

// pushDone releases what admitPush held for a push now answered.
func (q *quota) pushDone(size int64) {
	if q.MaxBytes > 0 {
		q.done.Add(size)
	}
}

// admitLongPoll takes a long-polling pop, or refuses it.
func (q *quota) admitLongPoll() error {
	if q.MaxWaitingPops == 0 {
		return nil
	}
	if n := q.longPolls.Add(1); n > q.MaxWaitingPops {
		q.longPolls.Add(-1)
		return &protocol.Error{Code: protocol.CodeTooMany, RetryAfterMS: ceilMS(waitingRetryAfter), Message: fmt.Sprintf(
			"the tenant holds %d long-polling pops; its max_waiting_pops is %d", n-1, q.MaxWaitingPops)}
	}
	return nil
}

func (q *quota) longPollDone() {
	if q.MaxWaitingPops > 0 {
		q.longPolls.Add(-1)
	}
}

func ceilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// refreshUsage reads the retained bytes of every tenant with MaxBytes.
func (b *Bridge) refreshUsage(ctx context.Context) error {
	var names []string
	var qs []*quota
	var dones []int64
	for _, t := range b.tenants {
		if t.quota.MaxBytes > 0 {
			names = append(names, t.name)
			qs = append(qs, t.quota)
			// Before the read: whatever was answered by now is in it.
			dones = append(dones, t.quota.done.Load())
		}
	}
	if len(names) == 0 {
		return nil
	}
	use, err := b.st.TenantUsage(ctx, names)
	if err != nil {
		return err
	}
	for i, q := range qs {
		q.mu.Lock()
		q.base, q.baseDone = use[names[i]].Bytes, dones[i]
		q.mu.Unlock()
	}
	return nil
}

// usageRefresher keeps the retained bytes fresh until the bridge stops.
func (b *Bridge) usageRefresher() {
	defer b.wg.Done()
	tick := time.NewTicker(b.cfg.QuotaRefresh)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if b.maintenance.Load() {
				continue
			}
			ctx, cancel := b.storeCtx()
			if err := b.refreshUsage(ctx); err != nil {
				b.log.Warn("read tenant usage", "err", err)
			}
			cancel()
		case <-b.quit:
			return
		}
	}
}

// hasByteQuotas says whether some tenant has MaxBytes.
func (b *Bridge) hasByteQuotas() bool {
	for _, t := range b.tenants {
		if t.quota.MaxBytes > 0 {
			return true
		}
	}
	return false
}
