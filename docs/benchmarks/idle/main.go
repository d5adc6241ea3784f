// Command idle measures what an idle Comb costs PostgreSQL: it fills a
// broker with queues of many partitions, each with a group that consumed
// everything, parks long polls on some of them, and then, with nothing
// pushed, samples pg_stat_database.xact_commit of Comb's database.
//
//	go run ./docs/benchmarks/idle -nats nats://127.0.0.1:4222 \
//	    -postgres-url 'postgres://postgres@127.0.0.1:5433/comb?sslmode=disable' \
//	    -queues 10000 -partitions 100 -polls 1000 -measure 60s
//
// It prints the setup's progress, then one line per interval with the
// commits per second and the CPU of this host's postgres processes (the
// broker's private cluster, when it runs here), and a final line with the
// averages.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/procstat"
)

func main() {
	natsURL := flag.String("nats", nats.DefaultURL, "Comb's NATS URL")
	pgURL := flag.String("postgres-url", "", "Comb's PostgreSQL, to read pg_stat_database (required)")
	queues := flag.Int("queues", 10000, "queues to create")
	partitions := flag.Int("partitions", 100, "partitions of each queue")
	polls := flag.Int("polls", 1000, "long polls to park, one per queue from the first")
	measure := flag.Duration("measure", 60*time.Second, "how long to sample once idle")
	every := flag.Duration("every", 10*time.Second, "sampling interval")
	settle := flag.Duration("settle", 10*time.Second, "wait after the setup before sampling")
	workers := flag.Int("workers", 32, "concurrent setup requests")
	prefix := flag.String("queue-prefix", "idle", "queue names are <prefix>.q<n>")
	flag.Parse()
	if *pgURL == "" {
		log.Fatal("-postgres-url is required")
	}
	ctx := context.Background()
	nc, err := nats.Connect(*natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c := comb.New(nc, comb.WithTimeout(60*time.Second))
	name := func(i int) string { return fmt.Sprintf("%s.q%05d", *prefix, i) }

	// Setup: one push of one message per partition, and one auto-ack pop
	// of them all, so each queue has its partitions and a group at the end.
	start := time.Now()
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			msgs := make([]comb.Message, *partitions)
			for {
				i := int(next.Add(1)) - 1
				if i >= *queues {
					return
				}
				for p := range msgs {
					msgs[p] = comb.Message{Partition: fmt.Sprint("p", p), Data: []byte("1")}
				}
				if _, err := c.Push(ctx, name(i), msgs); err != nil {
					log.Fatalf("push %s: %v", name(i), err)
				}
				for left := *partitions; left > 0; {
					got, err := c.Pop(ctx, name(i), comb.PopOptions{Max: *partitions, Partitions: *partitions, AutoAck: true})
					if err != nil {
						log.Fatalf("pop %s: %v", name(i), err)
					}
					left -= len(got)
				}
				if n := done.Add(1); n%1000 == 0 {
					fmt.Printf("setup: %d queues of %d partitions, %s\n", n, *partitions, time.Since(start).Round(time.Second))
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("setup: %d queues, %d partitions in all, in %s\n", *queues, *queues**partitions, time.Since(start).Round(time.Second))

	// Long polls that outlast the measurement, re-sent when they end.
	for i := range *polls {
		q := name(i % *queues)
		go func() {
			for {
				_, err := c.Pop(ctx, q, comb.PopOptions{AutoAck: true, Wait: 300 * time.Second})
				if err != nil {
					fmt.Fprintf(os.Stderr, "poll %s: %v\n", q, err)
					time.Sleep(time.Second)
				}
			}
		}()
	}
	time.Sleep(*settle)

	conn, err := pgx.Connect(ctx, *pgURL)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	commits := func() (int64, time.Time) {
		// A fresh snapshot each time: pg_stat_database is cached per
		// transaction.
		var n int64
		if err := conn.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
			log.Fatal(err)
		}
		return n, time.Now()
	}
	first, t0 := commits()
	cpu0 := postgresCPU()
	last, tl, cpul := first, t0, cpu0
	for time.Since(t0) < *measure {
		time.Sleep(*every)
		n, t := commits()
		cpu := postgresCPU()
		// This sampler's own statement counts one commit.
		fmt.Printf("idle: %.1f commits/s, postgres %.2f cores, over %s\n", float64(n-last-1)/t.Sub(tl).Seconds(),
			(cpu-cpul)/t.Sub(tl).Seconds(), t.Sub(tl).Round(time.Second))
		last, tl, cpul = n, t, cpu
	}
	samples := int64(*measure / *every)
	fmt.Printf("idle: %.2f commits/s and postgres %.3f cores on average over %s, with %d queues of %d partitions and %d long polls parked\n",
		float64(last-first-samples)/tl.Sub(t0).Seconds(), (cpul-cpu0)/tl.Sub(t0).Seconds(), tl.Sub(t0).Round(time.Second), *queues, *partitions, *polls)
}

// postgresCPU returns the CPU seconds of this host's processes named
// postgres.
func postgresCPU() float64 {
	var ticks float64
	for _, pid := range procstat.PostgresPIDs(0) {
		if t, ok := procstat.CPUTicks(pid); ok {
			ticks += t
		}
	}
	return ticks / procstat.ClockTicks
}
