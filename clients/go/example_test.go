package comb_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"

	comb "github.com/combmq/comb/clients/go"
)

// In the examples, nc is a *nats.Conn to a NATS server a Comb service
// (`comb serve`) answers on, as nats.Connect(nats.DefaultURL) returns for a
// local one. Here it reaches a Comb the tests start (see main_test.go), and
// go test checks each example's output.

func ExampleNew() {
	// The defaults, spelled out: subjects comb.<verb>.<queue>, 10 s per
	// request.
	c := comb.New(nc, comb.WithPrefix("comb"), comb.WithTimeout(10*time.Second))

	// An empty patch reads a queue's settings, creating it if needed.
	cfg, err := c.Configure(context.Background(), "example.new", comb.ConfigPatch{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("lease", cfg.LeaseMS, "ms, max attempts", cfg.MaxAttempts)
	// Output:
	// lease 30000 ms, max attempts 3
}

// A broker with authentication and TLS (docs/security.md) takes the
// credentials and the CA as nats.Connect options; the package
// documentation lists the option for every kind of credential.
func Example_authentication() {
	// secureURL is tls://host:port of a broker whose file has
	// tls { cert_file, key_file } and a users list; caFile signed its
	// certificate.
	conn, err := nats.Connect(secureURL,
		nats.UserInfo("app", "app-secret"), // or in the URL: nats://app:app-secret@host:4222
		nats.RootCAs(caFile),               // mutual TLS adds nats.ClientCert(certFile, keyFile)
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	res, err := comb.New(conn).Push(context.Background(), "example.secure", []comb.Message{{Data: []byte(`{"sku":42}`)}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res[0].Status)

	// A wrong password does not get in.
	_, err = nats.Connect(secureURL, nats.UserInfo("app", "guess"), nats.RootCAs(caFile))
	fmt.Println(err)
	// Output:
	// stored
	// nats: Authorization Violation
}

func ExampleClient_Push() {
	c := comb.New(nc)

	res, err := c.Push(context.Background(), "example.push", []comb.Message{
		{Partition: "eu", ID: "order-7", Data: []byte(`{"sku":42}`)}, // travels as "data"
		{Partition: "eu", ID: "order-8", Data: []byte(`{"sku":43}`)},
		{Data: []byte{0, 1, 2}}, // travels as "data_b64", into partition "default"
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range res {
		fmt.Println(r.Partition, r.Offset, r.Status)
	}
	// Output:
	// eu 0 stored
	// eu 1 stored
	// default 0 stored
}

func ExampleClient_Put() {
	c := comb.New(nc)

	// Like `nats req comb.put.example.put '{"sku":42}' -H Comb-Partition:eu`.
	r, err := c.Put(context.Background(), "example.put", []byte(`{"sku":42}`), comb.PutOptions{Partition: "eu"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Partition, r.Offset, r.Status)
	// Output:
	// eu 0 stored
}

func ExampleClient_Pop() {
	c := comb.New(nc)
	ctx := context.Background()
	const queue = "example.pop"
	if _, err := c.Push(ctx, queue, []comb.Message{
		{Partition: "eu", Data: []byte(`{"sku":42}`)},
		{Partition: "eu", Data: []byte(`{"sku":43}`)},
	}); err != nil {
		log.Fatal(err)
	}

	// Wait up to 5 s for messages, then settle what came with one
	// cumulative ack per partition at its last offset.
	batch, err := c.Pop(ctx, queue, comb.PopOptions{Group: "billing", Max: 100, Wait: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	last := map[string]comb.Delivery{}
	for _, d := range batch {
		fmt.Printf("%s/%d attempt %d: %s\n", d.Partition, d.Offset, d.Attempt, d.Data)
		last[d.Partition] = d
	}
	var acks []comb.Ack
	for _, d := range last {
		acks = append(acks, comb.Ack{Partition: d.Partition, Offset: d.Offset, Lease: d.Lease, Status: comb.AckCompleted})
	}
	results, err := c.Ack(ctx, queue, "billing", acks)
	if err != nil {
		log.Fatal(err)
	}
	for i, r := range results {
		if err := r.Err(); err != nil {
			// Typically an expired lease: the messages come again.
			fmt.Println(acks[i].Partition, err)
		}
	}

	info, err := c.Info(ctx, queue)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("billing pending:", info.Groups[0].Pending)
	// Output:
	// eu/0 attempt 1: {"sku":42}
	// eu/1 attempt 1: {"sku":43}
	// billing pending: 0
}

func ExampleClient_Consume() {
	c := comb.New(nc)
	const queue = "example.consume"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Push(ctx, queue, []comb.Message{
		{Data: []byte(`{"sku":42}`)}, {Data: []byte(`{"sku":43}`)}, {Data: []byte(`{"sku":44}`)},
	}); err != nil {
		log.Fatal(err)
	}

	// Consume runs until ctx is cancelled: here once three messages are
	// handled; in a service, on SIGTERM.
	stats := &comb.ConsumeStats{}
	err := c.Consume(ctx, queue, comb.ConsumeOptions{
		Group:       "billing",
		Max:         100,
		Partitions:  4,
		Concurrency: 2,
		AckInflight: 256,
		OnAckError:  func(err error) { log.Printf("ack: %v", err) },
		Stats:       stats,
	}, func(ctx context.Context, batch []comb.Delivery) error {
		for _, d := range batch {
			fmt.Printf("%s/%d: %s\n", d.Partition, d.Offset, d.Data)
		}
		if stats.Popped.Load() >= 3 {
			cancel()
		}
		return nil // completes the batch; an error hands it back
	})
	if err != nil {
		log.Fatal(err)
	}
	// Consume has waited for its acks.
	fmt.Println("handled", stats.Popped.Load(), "acked", stats.Acked.Load())
	// Output:
	// default/0: {"sku":42}
	// default/1: {"sku":43}
	// default/2: {"sku":44}
	// handled 3 acked 3
}

func ExampleClient_Configure() {
	c := comb.New(nc)
	ctx := context.Background()
	const queue = "example.configure"

	// Only the fields given change; the rest keep their values.
	cfg, err := c.Configure(ctx, queue, comb.ConfigPatch{
		MaxAttempts:  comb.Int64(5),
		DedupWindowS: comb.Int64(3600),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cfg.MaxAttempts, cfg.DedupWindowS, cfg.LeaseMS)

	// Within the dedup window, a message whose ID the partition already
	// has is not stored again.
	for range 2 {
		r, err := c.Put(ctx, queue, []byte(`{"sku":42}`), comb.PutOptions{ID: "order-7"})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.Offset, r.Status)
	}
	// Output:
	// 5 3600 30000
	// 0 stored
	// 0 duplicate
}

func ExampleClient_DeadLetters() {
	c := comb.New(nc)
	ctx := context.Background()
	const queue = "example.dlq"

	// Two messages that group billing gives up on at once.
	if _, err := c.Push(ctx, queue, []comb.Message{
		{Data: []byte(`{"sku":42}`)}, {Data: []byte(`{"sku":43}`)},
	}); err != nil {
		log.Fatal(err)
	}
	batch, err := c.Pop(ctx, queue, comb.PopOptions{Group: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	var acks []comb.Ack
	for _, d := range batch {
		acks = append(acks, comb.Ack{Partition: d.Partition, Offset: d.Offset, Lease: d.Lease, Status: comb.AckDead})
	}
	if _, err := c.Ack(ctx, queue, "billing", acks); err != nil {
		log.Fatal(err)
	}

	// Replay every dead letter of group billing, a page at a time.
	q := comb.DeadLetterQuery{Group: "billing"}
	for {
		page, next, err := c.DeadLetters(ctx, queue, q)
		if err != nil {
			log.Fatal(err)
		}
		var ids []string
		for _, d := range page {
			fmt.Printf("%s/%d %s after %d attempt(s): %s\n", d.Partition, d.Offset, d.Reason, d.Attempts, d.Data)
			ids = append(ids, d.DLQID)
		}
		n, err := c.Replay(ctx, queue, ids)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("replayed", n)
		if next == "" {
			break
		}
		q.After = next
	}
	// Output:
	// default/0 dead after 1 attempt(s): {"sku":42}
	// default/1 dead after 1 attempt(s): {"sku":43}
	// replayed 2
}

func ExampleError() {
	c := comb.New(nc)

	_, err := c.Info(context.Background(), "example.no-such-queue")
	var e *comb.Error
	switch {
	case errors.Is(err, comb.ErrNotFound):
		fmt.Println("no such queue")
	case errors.As(err, &e) && e.Temporary():
		fmt.Println("retry later:", e.Message)
	case errors.Is(err, nats.ErrNoResponders):
		fmt.Println("no Comb service is running")
	case err != nil:
		log.Fatal(err)
	}
	// Output:
	// no such queue
}

// A program that sends its own requests over NATS (here nc.Request, with
// the body of docs/protocol.md) reads the replies as the client does.
func ExampleDecodePopReply() {
	c := comb.New(nc)
	ctx := context.Background()
	if _, err := c.Push(ctx, "example.raw", []comb.Message{{Partition: "p", Data: []byte(`{"sku":42}`)}}); err != nil {
		log.Fatal(err)
	}

	reply, err := nc.Request("comb.pop.example.raw", []byte(`{"group":"g","max":10}`), 5*time.Second)
	if err == nil {
		err = comb.ReplyError(reply) // an error reply has no messages to decode
	}
	if err != nil {
		log.Fatal(err)
	}
	msgs, err := comb.DecodePopReply(reply.Data, "example.raw", nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		fmt.Println(m.Queue, m.Partition, m.Offset, string(m.Data), m.Attempt)
	}

	ack := fmt.Sprintf(`{"group":"g","acks":[{"partition":"p","offset":%d,"lease":%q}]}`, msgs[0].Offset, msgs[0].Lease)
	reply, err = nc.Request("comb.ack.example.raw", []byte(ack), 5*time.Second)
	if err == nil {
		err = comb.ReplyError(reply)
	}
	if err != nil {
		log.Fatal(err)
	}
	results, err := comb.DecodeAckReply(reply.Data)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("acked:", results[0].OK)

	// An error reply, read by ReplyError: that queue does not exist.
	bad, err := nc.Request("comb.ack.example.nosuch", []byte(ack), 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("not found:", errors.Is(comb.ReplyError(bad), comb.ErrNotFound))
	// Output:
	// example.raw p 0 {"sku":42} 1
	// acked: true
	// not found: true
}
