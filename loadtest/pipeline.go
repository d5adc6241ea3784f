package loadtest

import (
	"context"
	"fmt"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/handjson"
	"github.com/combmq/comb/protocol"
)

// The pipeline mode (Config.Pipeline): a consumer settles its batch with
// one transaction that acks it and pushes the same messages to the output
// queue, so a run shows what transactions cost against ack alone.

// PipelineMaxAgeS is the output queue's max_age_s: nothing consumes it, so
// retention by age keeps it bounded.
const PipelineMaxAgeS = 60

// PipelineQueue is the queue a pipeline run pushes its output to.
func PipelineQueue(queue string) string { return queue + ".out" }

// txnAcks and txnPush are a batch's transaction in clients/go's terms.
func txnOf(queue, group string, acks []comb.Ack, msgs []comb.Delivery, headers int) ([]comb.TxnAck, []comb.TxnPush) {
	tas := make([]comb.TxnAck, len(acks))
	for i, a := range acks {
		tas[i] = comb.TxnAck{Queue: queue, Group: group, Ack: a}
	}
	out := comb.TxnPush{Queue: PipelineQueue(queue), Messages: make([]comb.Message, len(msgs))}
	for i, m := range msgs {
		out.Messages[i] = comb.Message{Partition: m.Partition, Data: m.Data, Headers: loadHeader(headers)}
	}
	return tas, []comb.TxnPush{out}
}

// txn sends a batch's transaction with the raw client and returns one
// result per ack; the output's results must all be stored.
func (c *rawClient) txn(ctx context.Context, group string, acks []comb.Ack, msgs []comb.Delivery, enc Encoding) ([]comb.AckResult, error) {
	bp := bodyPool.Get().(*[]byte)
	defer bodyPool.Put(bp)
	b := appendTxnBody((*bp)[:0], c.queue, group, acks, msgs, enc, c.headers)
	*bp = b
	reply, err := c.request(ctx, "txn", c.subTxn, b, 0)
	if err != nil {
		return nil, err
	}
	res, err := parseTxnAcks(reply)
	if err != nil {
		return nil, fmt.Errorf("txn %s: %w", c.queue, err)
	}
	if len(res) != len(acks) {
		return nil, fmt.Errorf("txn %s: %d ack results for %d acks", c.queue, len(res), len(acks))
	}
	if _, err := checkPushReply(reply, len(msgs), false); err != nil {
		return nil, fmt.Errorf("txn %s: %w", c.queue, err)
	}
	return res, nil
}

// appendTxnBody appends a transaction's JSON to b: the acks on queue, and
// one push of msgs to PipelineQueue(queue), each in its partition, with
// the headers object hdr unless nil.
func appendTxnBody(b []byte, queue, group string, acks []comb.Ack, msgs []comb.Delivery, enc Encoding, hdr []byte) []byte {
	b = append(b, `{"acks":[`...)
	for i, a := range acks {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"queue":`...)
		b = handjson.AppendString(b, queue)
		b = append(b, `,"group":`...)
		b = handjson.AppendString(b, group)
		b = append(b, ',')
		b = appendAckMembers(b, a)
		b = append(b, '}')
	}
	b = append(b, `],"push":[{"queue":`...)
	b = handjson.AppendString(b, PipelineQueue(queue))
	b = append(b, `,"messages":[`...)
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"partition":`...)
		b = handjson.AppendString(b, m.Partition)
		if hdr != nil {
			b = append(b, `,"headers":`...)
			b = append(b, hdr...)
		}
		b = appendPayload(b, m.Data, enc)
		b = append(b, '}')
	}
	return append(b, "]}]}"...)
}

// parseTxnAcks reads the "acks" of a transaction reply.
func parseTxnAcks(b []byte) ([]comb.AckResult, error) {
	r, err := comb.DecodeTxnReply(b)
	return r.Acks, err
}

// txnSubject is the subject of every transaction.
var txnSubject = protocol.Subject(protocol.DefaultPrefix, protocol.VerbTxn, "")
