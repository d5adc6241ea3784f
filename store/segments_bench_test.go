package store

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/combmq/comb/domain"
)

// referencePlan is a push transaction of the closed-loop reference shape
// as the push worker coalesces it: reqs requests of 100 messages of 256
// bytes, each request to a partition of its own.
func referencePlan(reqs int) *pushPlan {
	p := &pushPlan{reqs: make([]domain.PushParams, reqs), outs: make([]domain.PushOutcome, reqs),
		places: make([][]msgPlace, reqs), segs: map[int64]*segmentBuf{}, hot: map[int64]bool{}}
	data := make([]byte, 256)
	for i := range p.reqs {
		msgs := make([]domain.PushMessage, 100)
		for j := range msgs {
			msgs[j].Data = data
		}
		p.reqs[i].Messages = msgs
		p.places[i] = make([]msgPlace, len(msgs))
		for j := range msgs {
			p.places[i][j].pid = int64(i + 1)
		}
		p.pids = append(p.pids, int64(i+1))
	}
	return p
}

// BenchmarkPushPayloads builds a reference push transaction's segments
// and encodes their payloads as the bytea[] parameter pgx sends, into the
// 256-byte buffer pgx starts each query's parameters in.
func BenchmarkPushPayloads(b *testing.B) {
	m := pgtype.NewMap()
	registerEncoders(m)
	p := referencePlan(16)
	b.ReportAllocs()
	for b.Loop() {
		clear(p.segs)
		p.buildSegments()
		_, _, _, payloads, _ := p.segmentArrays()
		if _, err := m.Encode(pgtype.ByteaArrayOID, pgtype.BinaryFormatCode, payloads, make([]byte, 0, 256)); err != nil {
			b.Fatal(err)
		}
	}
}
