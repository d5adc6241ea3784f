package bridge_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/combmq/comb/internal/combtest"
)

// BenchmarkPush measures pushes of 10 messages of 100 bytes from many
// concurrent requesters, and how many requests each transaction carried.
// The test cluster runs with fsync off: the figures show the bridge's
// overhead and coalescing, not a durable throughput.
func BenchmarkPush(b *testing.B) {
	env := combtest.Start(b)
	var sb strings.Builder
	sb.WriteString(`{"messages":[`)
	for i := range 10 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"partition":"p%d","data":"%s"}`, i%4, strings.Repeat("x", 98))
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m, err := env.NC.Request("comb.push.bench", body, reqTimeout)
			if err != nil {
				b.Error(err)
				return
			}
			if m.Header.Get(micro.ErrorCodeHeader) != "" {
				b.Error(string(m.Data))
				return
			}
		}
	})
	b.StopTimer()
	st := env.Bridge.Stats()
	b.ReportMetric(float64(b.N*10)/b.Elapsed().Seconds(), "msgs/s")
	if st.PushTransactions > 0 {
		b.ReportMetric(float64(b.N)/float64(st.PushTransactions), "reqs/tx")
	}
}

// BenchmarkPop measures pops of 100 messages with auto-ack.
func BenchmarkPop(b *testing.B) {
	env := combtest.Start(b)
	var sb strings.Builder
	sb.WriteString(`{"messages":[`)
	for i := range 1000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"data":{"n":%d,"pad":"%s"}}`, i, strings.Repeat("x", 80))
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	for range b.N/10 + 1 {
		push(b, env.NC, "pb", string(body))
	}
	b.ResetTimer()
	got := 0
	b.ReportAllocs()
	for range b.N {
		m, err := env.NC.Request("comb.pop.pb", []byte(`{"max":100,"auto_ack":true}`), reqTimeout)
		if err != nil {
			b.Fatal(err)
		}
		var rep struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			b.Fatal(err)
		}
		got += len(rep.Messages)
	}
	b.ReportMetric(float64(got)/b.Elapsed().Seconds(), "msgs/s")
}
