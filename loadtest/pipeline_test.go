package loadtest

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/protocol"
)

// TestTxnBodyMatchesProtocol holds the raw client's transaction body
// against encoding/json and protocol's TxnRequest, and its reply reader
// against a reply encoding/json writes.
func TestTxnBodyMatchesProtocol(t *testing.T) {
	t.Parallel()
	h := header{Run: 1, Seq: 2}
	acks := []comb.Ack{{Partition: "p\"1", Offset: 7, Lease: "l-1-ab", Status: protocol.AckCompleted}, {Partition: "p2", Offset: 0, Lease: "l-2-cd"}}
	for _, enc := range []Encoding{EncodingJSON, EncodingBinary} {
		msgs := []comb.Delivery{{Partition: "p\"1", Data: encodePayload(nil, enc, 64, &h)}, {Partition: "p2", Data: encodePayload(nil, enc, 80, &h)}}
		for _, hdr := range [][]byte{nil, loadHeaderJSON(40)} {
			var req protocol.TxnRequest
			strictDecode(t, appendTxnBody(nil, "q.a", "g", acks, msgs, enc, hdr), &req)
			require.Len(t, req.Acks, 2)
			for i, a := range req.Acks {
				require.Equal(t, "q.a", a.Queue)
				require.Equal(t, "g", a.Group)
				require.Equal(t, acks[i].Partition, a.Partition)
				require.Equal(t, acks[i].Offset, *a.Offset)
				require.Equal(t, acks[i].Lease, a.Lease)
				require.Equal(t, acks[i].Status, a.Status)
			}
			require.Len(t, req.Push, 1)
			require.Equal(t, "q.a.out", req.Push[0].Queue)
			for i, m := range req.Push[0].Messages {
				require.Equal(t, msgs[i].Partition, m.Partition)
				if enc == EncodingJSON {
					require.Equal(t, msgs[i].Data, []byte(m.Data))
				} else {
					got, err := base64.StdEncoding.DecodeString(*m.DataB64)
					require.NoError(t, err)
					require.Equal(t, msgs[i].Data, got)
				}
				if hdr == nil {
					require.Nil(t, m.Headers)
				} else {
					require.Equal(t, string(hdr), string(mustCanonical(t, m.Headers)))
				}
			}
		}
	}
	res, err := parseTxnAcks([]byte(`{"acks":[{"ok":true},{"ok":false,"error":"lease expired"}],"push":[{"results":[{"partition":"p","offset":1,"status":"stored"}]}]}`))
	require.NoError(t, err)
	require.Equal(t, []comb.AckResult{{OK: true}, {Error: "lease expired"}}, res)
}

func TestPipelineNeedsManualAckAndComb(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.Pipeline, c.ManualAck = true, false
	require.ErrorContains(t, c.validate(), "pipeline: needs manual-ack")
	c = DefaultConfig()
	c.Pipeline, c.Targets = true, []Target{TargetComb, TargetJetStream}
	require.ErrorContains(t, c.validate(), "pipeline: Comb only")
}
