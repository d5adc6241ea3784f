package bridge

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/combmq/comb/internal/wire"
	"github.com/combmq/comb/internal/wire/wiretest"
)

// BenchmarkDecodeStage is the decoding of pushes as one endpoint's
// subscription sees them: one goroutine takes every request. "serial"
// decodes each on that goroutine, as the handlers did before the intake;
// "intake" hands them to runtime.GOMAXPROCS decoders and takes them back
// in order (stage.handle, stage.sequence). An op is one push; the bodies
// are the loader's reference shape (100 messages of 256 bytes, about
// 28 KB) or one put-sized message (decoded inline by the intake). Run with
//
//	go test ./bridge -run '^$' -bench DecodeStage -cpu 1,2,4
//
// serial is flat whatever the cores; intake grows with them.
func BenchmarkDecodeStage(b *testing.B) {
	for _, shape := range []struct {
		name string
		body []byte
	}{
		{"push-100x256B", wiretest.ReferencePush(100)},
		{"push-1x256B", wiretest.ReferencePush(1)},
	} {
		prepare := func(_ *tenant, req micro.Request) func() {
			msgs, err := wire.DecodePush(req.Data(), wire.DefaultLimits())
			if err != nil {
				panic(err)
			}
			return func() { sink.Add(int64(len(msgs))) }
		}
		req := &detached{subject: "comb.push.bench", reply: "_INBOX.x", data: shape.body}
		b.Run(shape.name+"/serial", func(b *testing.B) {
			b.SetBytes(int64(len(shape.body)))
			for b.Loop() {
				if next := prepare(nil, req); next != nil {
					next()
				}
			}
		})
		b.Run(shape.name+"/intake", func(b *testing.B) {
			quit := make(chan struct{})
			workers := runtime.GOMAXPROCS(0)
			in := newIntake(workers, quit)
			for range workers {
				go in.decoder()
			}
			var seen atomic.Int64
			counted := func(t *tenant, req micro.Request) func() {
				next := prepare(t, req)
				return func() { next(); seen.Add(1) }
			}
			st := in.newStage(counted, true)
			go st.sequence()
			t := &tenant{}
			b.SetBytes(int64(len(shape.body)))
			b.ResetTimer()
			for range b.N {
				st.handle(t, req)
			}
			for seen.Load() < int64(b.N) {
				runtime.Gosched()
			}
			b.StopTimer()
			close(quit)
		})
	}
}

var sink atomic.Int64
