package bridge

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// The intake takes the decoding of pushes, puts and acks off their
// endpoints' subscriptions. NATS hands each subscription's requests to one
// goroutine; decoding a large push there would make that goroutine the
// one serial stage of the hot path, and a machine with more cores would
// get no more throughput from it. So the handler only detaches the request
// and hands it in: Config.DecodeWorkers decoders run the first half of the
// handler (parse, decode, check), and what follows it (admission and the
// hand-off to the coalescers) runs in the order the requests came, for an
// ordered stage (push, put: pipelined pushes of one partition keep their
// order), or at once on the decoder, for an unordered one (ack, whose
// workers never kept an order).
//
// A small request is decoded on the subscription's goroutine when nothing
// of its stage is ahead of it: its decoding costs less than the hand-off.

// inlineBytes is the largest body decoded on the subscription's goroutine
// (when nothing is ahead of it). 4 KiB is about ten messages of the
// loader's 256 bytes, a few microseconds of decoding: about what handing
// it to another goroutine and back costs.
const inlineBytes = 4 << 10

// stagedHandler is the first half of a handler: it decodes and checks a
// request, answering it on failure, and returns what must follow, or nil
// when it has answered already.
type stagedHandler func(t *tenant, req micro.Request) (next func())

// slot is one request on its way through the intake.
type slot struct {
	t       *tenant
	req     *detached
	prepare stagedHandler
	next    func()
	done    chan struct{} // ordered stages: closed once prepare has run
}

// intake is the decoders, shared by every stage.
type intake struct {
	work chan *slot
	quit <-chan struct{}
	// taken counts the slots handed in and not yet through, so that Stop
	// can wait for them before it refuses new admissions.
	taken sync.WaitGroup
}

func newIntake(workers int, quit <-chan struct{}) *intake {
	return &intake{work: make(chan *slot, 4*workers), quit: quit}
}

// decoder runs the first halves of handlers. In an unordered stage it
// runs the second half too.
func (in *intake) decoder() {
	for {
		select {
		case s := <-in.work:
			s.next = s.prepare(s.t, s.req)
			if s.done != nil {
				close(s.done)
				continue
			}
			if s.next != nil {
				s.next()
			}
			in.taken.Done()
		case <-in.quit:
			return
		}
	}
}

// wait waits until every slot handed in is through, or until deadline;
// it reports whether they all are.
func (in *intake) wait(deadline time.Time) bool {
	done := make(chan struct{})
	go func() {
		in.taken.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(time.Until(deadline)):
		return false
	}
}

// stage is one endpoint subscription's way through the intake.
type stage struct {
	in      *intake
	prepare stagedHandler
	ordered bool
	order   chan *slot   // ordered: the slots in the order they came
	pending atomic.Int64 // ordered: slots handed in and not yet through
}

// newStage makes the stage of one endpoint; an ordered stage needs its
// sequencer running (go st.sequence()).
func (in *intake) newStage(prepare stagedHandler, ordered bool) *stage {
	st := &stage{in: in, prepare: prepare, ordered: ordered}
	if ordered {
		// Enough to keep every decoder busy with this stage; past it
		// the subscription's goroutine waits, and NATS buffers the
		// requests within the endpoint's pending limits, as when a
		// handler is slow.
		st.order = make(chan *slot, 2*cap(in.work))
	}
	return st
}

// handle is the endpoint's handler, on the subscription's goroutine.
func (st *stage) handle(t *tenant, req micro.Request) {
	small := len(req.Data()) <= inlineBytes
	if small && (!st.ordered || st.pending.Load() == 0) {
		// Nothing ahead of it is unfinished: taking it now keeps the
		// order.
		if next := st.prepare(t, req); next != nil {
			next()
		}
		return
	}
	s := &slot{t: t, req: detach(t, req), prepare: st.prepare}
	st.in.taken.Add(1)
	if st.ordered {
		s.done = make(chan struct{})
		st.pending.Add(1)
		st.order <- s
	}
	st.in.work <- s
}

// sequence runs the second halves of an ordered stage's requests in the
// order they came.
func (st *stage) sequence() {
	for {
		select {
		case s := <-st.order:
			select {
			case <-s.done:
			case <-st.in.quit:
				return
			}
			if s.next != nil {
				s.next()
			}
			st.pending.Add(-1)
			st.in.taken.Done()
		case <-st.in.quit:
			return
		}
	}
}

// detached is a request taken off its micro.Request, for a goroutine that
// runs after the handler has returned: the framework reads its request
// then, so nothing else may answer through it. It answers on the
// tenant's connection as the framework would, and its error answers count
// as a worker's (endpointStats.asyncErrors).
type detached struct {
	nc      *nats.Conn
	subject string
	reply   string
	data    []byte
	headers micro.Headers
}

var _ micro.Request = (*detached)(nil)

func detach(t *tenant, req micro.Request) *detached {
	return &detached{nc: t.nc, subject: req.Subject(), reply: req.Reply(), data: req.Data(), headers: req.Headers()}
}

func (d *detached) Respond(data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Data: data}
	for _, o := range opts {
		o(m)
	}
	return d.send(m)
}

func (d *detached) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return micro.ErrMarshalResponse
	}
	return d.Respond(b, opts...)
}

// Error answers like micro's own Request.Error: the code and description
// in its headers, data as the body.
func (d *detached) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	if code == "" || description == "" {
		return micro.ErrArgRequired
	}
	m := &nats.Msg{Data: data, Header: nats.Header{
		micro.ErrorHeader:     []string{description},
		micro.ErrorCodeHeader: []string{code},
	}}
	for _, o := range opts {
		o(m)
	}
	return d.send(m)
}

func (d *detached) send(m *nats.Msg) error {
	if d.reply == "" {
		return nats.ErrMsgNoReply
	}
	m.Subject = d.reply
	return d.nc.PublishMsg(m)
}

func (d *detached) Data() []byte           { return d.data }
func (d *detached) Headers() micro.Headers { return d.headers }
func (d *detached) Subject() string        { return d.subject }
func (d *detached) Reply() string          { return d.reply }
