package bridge

import (
	"time"

	"github.com/combmq/comb/domain"
)

// Observer receives the bridge's figures where its workers learn them: once
// per push and ack transaction, once per pop store call and reply, once per
// answered request. Package metrics implements it; a nil Observer in Config
// observes nothing.
//
// Its methods run on the bridge's workers, on the hot path: they must be
// cheap, must not block, and must not keep the slices they are given.
type Observer interface {
	// PushTx is one push transaction: its store call took d, and outs are
	// the outcomes of reqs (one each; Err set on a refused request).
	PushTx(d time.Duration, reqs []domain.PushParams, outs []domain.PushOutcome)
	// AckTx is one ack store call, like PushTx.
	AckTx(d time.Duration, reqs []domain.AckParams, outs []domain.AckOutcome)
	// PopTx is one try of a pop: its store calls took d and leased n
	// messages (0 when it found none or failed).
	PopTx(d time.Duration, queue domain.QueueRef, n int)
	// Popped is the messages a pop's reply carries.
	Popped(queue domain.QueueRef, msgs []domain.Message)
	// Answered is one request of tenant answered, d after the bridge took
	// it. waited is set for a pop that long-polled.
	Answered(tenant, verb string, waited bool, d time.Duration)
}
