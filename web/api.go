package web

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/protocol"
)

// Overview is the reply of GET /api/overview: what the page shows at the
// top and in its list of queues.
type Overview struct {
	Now    time.Time `json:"now"`
	Health Health    `json:"health"`
	Spool  Spool     `json:"spool"`
	// Replay says whether POST /api/dlq/replay is enabled.
	Replay bool `json:"replay"`
	// SampleIntervalMS is the time between samples: http_sample_interval,
	// or longer when sampling is slow (sampleWait).
	SampleIntervalMS int64 `json:"sample_interval_ms"`
	// MaxQueues is the most queues shown; More is set when there are more.
	MaxQueues int  `json:"max_queues"`
	More      bool `json:"more"`
	// Error is set when the queues could not be read now; SampleError
	// when the latest sample could not.
	Error       string `json:"error,omitempty"`
	SampleError string `json:"sample_error,omitempty"`
	// Times are the samples' times (Unix milliseconds), oldest first; each
	// queue's Series is aligned with them.
	Times  []int64 `json:"times"`
	Queues []Queue `json:"queues"`
}

// Health is the broker's state as the page shows it.
type Health struct {
	Postgres      bool      `json:"postgres"`
	PostgresError string    `json:"postgres_error,omitempty"`
	NATS          bool      `json:"nats"`
	Bridge        bool      `json:"bridge"`
	Version       string    `json:"version"`
	StartedAt     time.Time `json:"started_at"`
	UptimeS       float64   `json:"uptime_s"`
}

// Spool is the broker's spool: off (Enabled false, Note says why), or
// what it holds and how its drain goes; and whether the broker is in
// maintenance mode.
type Spool struct {
	Enabled     bool   `json:"enabled"`
	Note        string `json:"note,omitempty"`
	Maintenance bool   `json:"maintenance"`
	Bytes       int64  `json:"bytes"`
	MaxBytes    int64  `json:"max_bytes"`
	Records     int64  `json:"records"`
	Messages    int64  `json:"messages"`
	// OldestAgeS is the age of the oldest record not yet drained.
	OldestAgeS float64 `json:"oldest_age_s"`
	// Drained counts the messages drained since start; DrainRate is
	// per second over the last ten seconds.
	Drained   int64   `json:"drained"`
	DrainRate float64 `json:"drain_rate"`
}

// Queue is one queue's line: figures read now, rates and series from the
// samples.
type Queue struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
	// Depth is the backlog: the largest pending of the groups, or the
	// retained messages while no group reads the queue.
	Depth       int64   `json:"depth"`
	Partitions  int64   `json:"partitions"`
	Messages    int64   `json:"messages"`
	Bytes       int64   `json:"bytes"`
	Pushed      int64   `json:"pushed"`
	DeadLetters int64   `json:"dead_letters"`
	Pending     int64   `json:"pending"` // the largest of its groups'
	Groups      []Group `json:"groups"`
	// Rates are per second over the latest sample interval; null until the
	// queue has been in two samples.
	Rates  *Rates `json:"rates"`
	Series Series `json:"series"`
}

// Group is one consumer group of a queue.
type Group struct {
	Name    string `json:"name"`
	Popped  int64  `json:"popped"`
	Settled int64  `json:"settled"`
	Pending int64  `json:"pending"`
	Leased  int64  `json:"leased"`
}

// Rates are messages per second: pushed, popped (first deliveries, summed
// over groups) and acked (settled, summed over groups).
type Rates struct {
	Push float64 `json:"push"`
	Pop  float64 `json:"pop"`
	Ack  float64 `json:"ack"`
}

// Series are a queue's figures per sample (Depth is Queue.Depth), aligned with Overview.Times;
// null where the queue was not sampled (or, for rates, had no earlier
// sample).
type Series struct {
	Depth []*int64   `json:"depth"`
	Push  []*float64 `json:"push"`
	Pop   []*float64 `json:"pop"`
	Ack   []*float64 `json:"ack"`
}

func (p *Page) handleOverview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	now := time.Now()
	out := Overview{
		Now:              now.UTC(),
		Health:           p.health(ctx, now),
		Spool:            p.spool(),
		Replay:           p.opts.Replay,
		SampleIntervalMS: cmp.Or(p.every.Load(), p.opts.SampleInterval.Milliseconds()),
		MaxQueues:        p.opts.MaxQueues,
		Times:            []int64{},
		Queues:           []Queue{},
	}
	if msg, _ := p.ring.lastError(); msg != "" {
		out.SampleError = msg
	}
	totals, err := p.opts.Store.Totals(ctx, p.opts.MaxQueues+1)
	if err != nil {
		out.Error = err.Error()
		writeJSON(w, http.StatusOK, out)
		return
	}
	if len(totals) > p.opts.MaxQueues {
		totals, out.More = totals[:p.opts.MaxQueues], true
	}
	samples := p.ring.samples()
	for _, s := range samples {
		out.Times = append(out.Times, s.at.UnixMilli())
	}
	for _, qt := range totals {
		q := Queue{
			Tenant: qt.Queue.Tenant, Name: qt.Queue.Name, Partitions: qt.Partitions, Messages: qt.Messages,
			Bytes: qt.Bytes, Pushed: qt.Pushed, DeadLetters: qt.DeadLetters, Groups: make([]Group, len(qt.Groups)),
			Series: Series{
				Depth: make([]*int64, len(samples)), Push: make([]*float64, len(samples)),
				Pop: make([]*float64, len(samples)), Ack: make([]*float64, len(samples)),
			},
		}
		for i, g := range qt.Groups {
			q.Groups[i] = Group(g)
			q.Pending = max(q.Pending, g.Pending)
		}
		q.Depth = depthOf(qt)
		for i, s := range samples {
			pt, ok := s.points[qt.Queue]
			if !ok {
				continue
			}
			q.Series.Depth[i] = &pt.depth
			if pt.ok {
				q.Series.Push[i], q.Series.Pop[i], q.Series.Ack[i] = &pt.push, &pt.pop, &pt.ack
				q.Rates = &Rates{Push: pt.push, Pop: pt.pop, Ack: pt.ack}
			}
		}
		out.Queues = append(out.Queues, q)
	}
	writeJSON(w, http.StatusOK, out)
}

func (p *Page) health(ctx context.Context, now time.Time) Health {
	h := Health{
		Version:   p.opts.Version,
		StartedAt: p.opts.Started.UTC(),
		UptimeS:   now.Sub(p.opts.Started).Seconds(),
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := p.opts.Store.Ping(pctx); err != nil {
		h.PostgresError = err.Error()
	} else {
		h.Postgres = true
	}
	h.NATS = p.opts.NATSReady != nil && p.opts.NATSReady()
	h.Bridge = p.opts.BridgeRunning != nil && p.opts.BridgeRunning()
	return h
}

// queueParam reads the queue a request names: ?tenant=…&queue=… (tenant
// empty or absent for the global tenant).
func queueParam(q url.Values) (domain.QueueRef, error) {
	ref := domain.QueueRef{Tenant: q.Get("tenant"), Name: q.Get("queue")}
	if ref.Name == "" {
		return ref, fmt.Errorf("%w: name the queue: ?queue=<name> (and &tenant=<account> for a tenant's)", domain.ErrInvalid)
	}
	if err := protocol.ValidateQueue(ref.Name); err != nil {
		return ref, fmt.Errorf("%w: %s", domain.ErrInvalid, errorText(err))
	}
	return ref, nil
}

// limitParam is a page's ?limit=: def when it is missing, else a number
// from 1 to most.
func limitParam(q url.Values, def, most int) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > most {
		return 0, fmt.Errorf("%w: limit %q: want 1 to %d", domain.ErrInvalid, s, most)
	}
	return n, nil
}

// errorText is err's message without a protocol error's wire code: the
// HTTP status says it.
func errorText(err error) string {
	if pe, ok := protocol.AsError(err); ok {
		return pe.Message
	}
	return err.Error()
}

// maxInfoReply bounds a queue page's bytes, as maxDLQReply a dead-letter
// page's.
const maxInfoReply = 1 << 20

// handleQueue is GET /api/queue?tenant=&queue=&after=&limit=: a page of
// the queue's info, in the shape of the protocol's info reply
// (protocol.Info), limit partitions and groups at most (100 unless given).
func (p *Page) handleQueue(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ref, err := queueParam(q)
	if err != nil {
		writeError(w, err)
		return
	}
	params := domain.InfoParams{Queue: ref, Limit: 100}
	if s := q.Get("after"); s != "" {
		if params.Partitions, params.Groups, err = wire.DecodeInfoCursor(s); err != nil {
			writeError(w, fmt.Errorf("%w: %s", domain.ErrInvalid, errorText(err)))
			return
		}
	}
	if params.Limit, err = limitParam(q, params.Limit, protocol.MaxInfoLimit); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	info, err := p.opts.Store.Info(ctx, params)
	if err != nil {
		writeError(w, err)
		return
	}
	body, _ := wire.InfoReply(info, params, maxInfoReply)
	writeRaw(w, http.StatusOK, body)
}

// maxDLQReply bounds a dead-letter page's bytes: the page lists what fits.
const maxDLQReply = 1 << 20

// handleDLQ is GET /api/dlq?tenant=&queue=&group=&after=&limit=: a page
// of dead letters, in the shape of the protocol's dlq list reply.
func (p *Page) handleDLQ(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ref, err := queueParam(q)
	if err != nil {
		writeError(w, err)
		return
	}
	params := domain.DLQParams{Queue: ref, Group: q.Get("group"), After: q.Get("after"), Limit: 50}
	if params.Limit, err = limitParam(q, params.Limit, protocol.MaxDLQLimit); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	dls, next, err := p.opts.Store.DeadLetters(ctx, params)
	if err != nil {
		writeError(w, err)
		return
	}
	body, _ := wire.DLQReply(dls, next, maxDLQReply)
	writeRaw(w, http.StatusOK, body)
}

// ReplayRequest is the body of POST /api/dlq/replay.
type ReplayRequest struct {
	Tenant string   `json:"tenant"`
	Queue  string   `json:"queue"`
	IDs    []string `json:"ids"`
}

// handleReplay is POST /api/dlq/replay: it pushes the chosen dead letters
// again, when Options.Replay allows it. The body must be JSON, which a
// cross-site form cannot send without a preflight this listener never
// grants, and a request from another origin is refused.
func (p *Page) handleReplay(w http.ResponseWriter, r *http.Request) {
	if !p.opts.Replay {
		writeJSON(w, http.StatusForbidden, errorBody{Error: "replay is off: start comb with -http-dlq-replay (COMB_HTTP_DLQ_REPLAY, http_dlq_replay in the file)"})
		return
	}
	if err := sameOrigin(r); err != nil {
		writeJSON(w, http.StatusForbidden, errorBody{Error: err.Error()})
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeJSON(w, http.StatusUnsupportedMediaType, errorBody{Error: "send the body as application/json: {\"tenant\":…,\"queue\":…,\"ids\":[…]}"})
		return
	}
	var req ReplayRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, fmt.Errorf("%w: body: %v; want {\"tenant\":…,\"queue\":…,\"ids\":[\"d-1\",…]}", domain.ErrInvalid, err))
		return
	}
	ref, err := queueParam(url.Values{"tenant": {req.Tenant}, "queue": {req.Queue}})
	if err != nil {
		writeError(w, err)
		return
	}
	if len(req.IDs) == 0 || len(req.IDs) > protocol.MaxDLQIDs {
		writeError(w, fmt.Errorf("%w: ids: want 1 to %d dead-letter ids", domain.ErrInvalid, protocol.MaxDLQIDs))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	n, err := p.opts.Store.ReplayDeadLetters(ctx, ref, req.IDs)
	if err != nil {
		writeError(w, err)
		return
	}
	writeRaw(w, http.StatusOK, wire.DoneReply(n))
}

// sameOrigin refuses a request whose Origin (sent by browsers on every
// POST) names another host than the one it was sent to.
func sameOrigin(r *http.Request) error {
	o := r.Header.Get("Origin")
	if o == "" {
		return nil // not a browser: curl and scripts
	}
	u, err := url.Parse(o)
	if err != nil || u.Host != r.Host {
		return fmt.Errorf("a request from origin %q is refused: replay from the status page itself", o)
	}
	return nil
}

type errorBody struct {
	Error string `json:"error"`
}

// writeError answers err with the status its kind calls for.
func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, domain.ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, domain.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, context.DeadlineExceeded):
		code = http.StatusGatewayTimeout
	}
	writeJSON(w, code, errorBody{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encode reply"}`)
	}
	writeRaw(w, code, b)
}

func writeRaw(w http.ResponseWriter, code int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// spool is the spool card's figures.
func (p *Page) spool() Spool {
	if p.opts.Spool == nil {
		return Spool{Note: NoSpool}
	}
	return p.opts.Spool()
}
