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

// BenchmarkInfoPages walks every page of comb.info on a queue of 40,000
// partitions with 200-byte names (about 10 MB of partitions, more than
// the default max_payload of 8 MiB), as a client reads the whole queue.
// It reports the pages of one walk and the largest reply; an op is one
// walk. Before paging, this reply was dropped for its size.
func BenchmarkInfoPages(b *testing.B) {
	env := combtest.Start(b)
	long := strings.Repeat("p", 200)
	for batch := range 4 {
		var sb strings.Builder
		sb.WriteString(`{"messages":[`)
		for i := range 10000 {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"partition":"%s-%05d","data":1}`, long, batch*10000+i)
		}
		sb.WriteString(`]}`)
		push(b, env.NC, "wide", sb.String())
	}
	pages, largest := 0, 0
	b.ResetTimer()
	for b.Loop() {
		seen, after := 0, ""
		for {
			m, err := env.NC.Request("comb.info.wide", fmt.Appendf(nil, `{"limit":10000,"after":%q}`, after), reqTimeout)
			if err != nil {
				b.Fatal(err)
			}
			var rep struct {
				Partitions []json.RawMessage `json:"partitions"`
				Next       string            `json:"next"`
			}
			if err := json.Unmarshal(m.Data, &rep); err != nil {
				b.Fatal(err, string(m.Data))
			}
			pages++
			largest = max(largest, len(m.Data))
			seen += len(rep.Partitions)
			if rep.Next == "" {
				break
			}
			after = rep.Next
		}
		if seen != 40000 {
			b.Fatalf("a walk saw %d partitions, want 40000", seen)
		}
	}
	b.ReportMetric(float64(pages)/float64(b.N), "pages/op")
	b.ReportMetric(float64(largest), "max-reply-bytes")
}
