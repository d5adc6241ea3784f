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

// The examples talk to a Comb service (`comb serve`) reachable at
// nats.DefaultURL. They have no Output lines because they need that
// service; the tests in this package exercise the same calls against a real
// one.

func ExampleNew() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	// The defaults, spelled out: subjects comb.<verb>.<queue>, 10 s per
	// request.
	c := comb.New(nc, comb.WithPrefix("comb"), comb.WithTimeout(10*time.Second))
	_ = c
}

func ExampleClient_Push() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c := comb.New(nc)

	res, err := c.Push(context.Background(), "orders", []comb.Message{
		{Partition: "eu", ID: "order-7", Data: []byte(`{"sku":42}`)}, // travels as "data"
		{Data: []byte{0, 1, 2}}, // travels as "data_b64"
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range res {
		fmt.Println(r.Partition, r.Offset, r.Status)
	}
}

func ExampleClient_Put() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c := comb.New(nc)

	// Like `nats req comb.put.orders '{"sku":42}' -H Comb-Partition:eu`.
	r, err := c.Put(context.Background(), "orders", []byte(`{"sku":42}`), comb.PutOptions{Partition: "eu"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Partition, r.Offset, r.Status)
}

func ExampleClient_Pop() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c := comb.New(nc)
	ctx := context.Background()

	// Wait up to 5 s for messages, then settle what came with one
	// cumulative ack per partition at its last offset.
	batch, err := c.Pop(ctx, "orders", comb.PopOptions{Group: "billing", Max: 100, Wait: 5 * time.Second})
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
	results, err := c.Ack(ctx, "orders", "billing", acks)
	if err != nil {
		log.Fatal(err)
	}
	for i, r := range results {
		if err := r.Err(); err != nil {
			// Typically an expired lease: the messages come again.
			fmt.Println(acks[i].Partition, err)
		}
	}
}

func ExampleClient_Consume() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c := comb.New(nc)

	// Stop after a minute; in a service, cancel on SIGTERM instead.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	stats := &comb.ConsumeStats{}
	err = c.Consume(ctx, "orders", comb.ConsumeOptions{
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
		return nil // completes the batch; an error hands it back
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("handled", stats.Popped.Load(), "acked", stats.Acked.Load())
}

func ExampleClient_Configure() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c := comb.New(nc)

	// Only the fields given change; the rest keep their values.
	cfg, err := c.Configure(context.Background(), "orders", comb.ConfigPatch{
		MaxAttempts:  comb.Int64(5),
		DedupWindowS: comb.Int64(3600),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cfg.MaxAttempts, cfg.DedupWindowS, cfg.LeaseMS)
}

func ExampleClient_DeadLetters() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c := comb.New(nc)
	ctx := context.Background()

	// Replay every dead letter of group billing, a page at a time.
	q := comb.DeadLetterQuery{Group: "billing"}
	for {
		page, next, err := c.DeadLetters(ctx, "orders", q)
		if err != nil {
			log.Fatal(err)
		}
		var ids []string
		for _, d := range page {
			ids = append(ids, d.DLQID)
		}
		n, err := c.Replay(ctx, "orders", ids)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("replayed", n)
		if next == "" {
			break
		}
		q.After = next
	}
}

func ExampleError() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c := comb.New(nc)

	_, err = c.Info(context.Background(), "no-such-queue")
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
}
