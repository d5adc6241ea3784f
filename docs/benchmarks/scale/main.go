// Command scale measures what a queue's partition count costs: it creates
// a queue of -partitions partitions, times a new group's first pop, puts
// messages in -ready-pct of the partitions and times pops that name no
// partition, the pop a consumer sends. Run it once per size against a
// fresh broker, e.g. 200, 10000, 100000 and 1000000:
//
//	go run ./docs/benchmarks/scale -nats nats://127.0.0.1:4222 \
//	    -postgres-url 'postgres://…' -partitions 1000000 -ready-pct 1 -pops 300
//
// It prints one line of figures: creation time, the first pop of a new
// group from the end (and, last, of one from the start), pop p50/p99, the
// database's size and, with -broker-pid, the broker's RSS; with
// -postgres-url also the cursor rows at the end and the ready set's rows
// when the timed pops start; last, a seek of the timed group back to the
// oldest message and its first pop, one of the group from the start to
// the end, and two of the timed group to a time, each with its first pop.
// -groups N makes N groups before the partitions; -pushers N creates them
// with N pushes in flight.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/internal/procstat"
)

func main() {
	natsURL := flag.String("nats", nats.DefaultURL, "Comb's NATS URL")
	pgURL := flag.String("postgres-url", "", "Comb's PostgreSQL, for the database's size (optional)")
	parts := flag.Int("partitions", 200, "partitions of the queue")
	readyPct := flag.Float64("ready-pct", 1, "percent of the partitions given messages before the timed pops")
	pops := flag.Int("pops", 300, "timed pops")
	brokerPID := flag.Int("broker-pid", 0, "the broker's process, for its RSS (optional)")
	settle := flag.Duration("settle", 0, "wait this long after the last push before the timed pops (the sweeper trims the ready set meanwhile)")
	groups := flag.Int("groups", 0, "consumer groups made (from the start) before the partitions, which never pop again")
	pushers := flag.Int("pushers", 1, "pushes in flight at once while the partitions are created")
	flag.Parse()
	ctx := context.Background()
	nc, err := nats.Connect(*natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c := comb.New(nc, comb.WithTimeout(5*time.Minute))
	queue := fmt.Sprintf("scale.p%d", *parts)
	name := func(i int) string { return fmt.Sprintf("p%07d", i) }
	push := func(ids []int) {
		for len(ids) > 0 {
			n := min(len(ids), 10000)
			msgs := make([]comb.Message, n)
			for k, i := range ids[:n] {
				msgs[k] = comb.Message{Partition: name(i), Data: []byte("1")}
			}
			if _, err := c.Push(ctx, queue, msgs); err != nil {
				log.Fatalf("push: %v", err)
			}
			ids = ids[n:]
		}
	}

	// Groups that exist before the partitions: a revision that makes
	// cursors eagerly writes one per partition for each of them as the
	// pushes create the partitions.
	if *groups > 0 {
		if _, err := c.Configure(ctx, queue, comb.ConfigPatch{}); err != nil {
			log.Fatalf("configure: %v", err)
		}
		for i := range *groups {
			if _, err := c.Pop(ctx, queue, comb.PopOptions{Group: fmt.Sprintf("early%d", i), AutoAck: true}); err != nil {
				log.Fatal(err)
			}
		}
	}

	// Every partition, one message each, 10,000 a push, -pushers pushes
	// at a time.
	all := make([]int, *parts)
	for i := range all {
		all[i] = i
	}
	start := time.Now()
	beforeAll := start.Add(-time.Second) // before every message
	var g errgroup.Group
	g.SetLimit(*pushers)
	for from := 0; from < len(all); from += 10000 {
		chunk := all[from:min(from+10000, len(all))]
		g.Go(func() error { push(chunk); return nil })
	}
	_ = g.Wait()
	created := time.Since(start)
	fmt.Fprintf(os.Stderr, "created %d partitions in %s (%d pushers)\n", *parts, created.Round(time.Millisecond), *pushers)

	// A new group's first pop, placed after everything: it makes the
	// group's cursors and finds nothing.
	start = time.Now()
	if _, err := c.Pop(ctx, queue, comb.PopOptions{Group: "g", From: comb.FromNew, AutoAck: true}); err != nil {
		log.Fatal(err)
	}
	firstPop := time.Since(start)

	// Messages in ready-pct of the partitions, spread evenly, enough for
	// every timed pop to find one.
	ready := max(1, int(float64(*parts)**readyPct/100))
	per := (*pops + ready - 1) / ready
	var ids []int
	for range per {
		for r := range ready {
			ids = append(ids, r*(*parts/ready))
		}
	}
	midway := time.Now() // after the partitions' messages, before these
	push(ids)
	time.Sleep(*settle)
	readyBefore := readyRows(ctx, *pgURL)
	lat := make([]time.Duration, 0, *pops)
	for range *pops {
		t := time.Now()
		got, err := c.Pop(ctx, queue, comb.PopOptions{Group: "g", Max: 1, AutoAck: true})
		if err != nil {
			log.Fatal(err)
		}
		if len(got) != 1 {
			log.Fatalf("a timed pop got %d messages", len(got))
		}
		lat = append(lat, time.Since(t))
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }

	// Last, as it leaves every partition ready for a group that never
	// pops again: a new group that starts at the oldest message.
	start = time.Now()
	if _, err := c.Pop(ctx, queue, comb.PopOptions{Group: "s", Max: 1, AutoAck: true}); err != nil {
		log.Fatal(err)
	}
	firstAll := time.Since(start)

	db, cursors := "-", "-"
	if *pgURL != "" {
		conn, err := pgx.Connect(ctx, *pgURL)
		if err != nil {
			log.Fatal(err)
		}
		var size, rows int64
		if err := conn.QueryRow(ctx, `SELECT pg_database_size(current_database()), (SELECT count(*) FROM comb_cursors)`).Scan(&size, &rows); err != nil {
			log.Fatal(err)
		}
		cursors = fmt.Sprint(rows)
		conn.Close(ctx)
		db = fmt.Sprintf("%.0f MB", float64(size)/1e6)
	}
	rss := "-"
	if *brokerPID > 0 {
		rss = fmt.Sprintf("%.0f MB", procstat.RSS(*brokerPID))
	}

	// After the figures, as it may write rows: group g, which has popped
	// where the messages are, sought back to the oldest message on every
	// partition, then its first pop.
	start = time.Now()
	if _, err := c.Seek(ctx, queue, comb.SeekOptions{Group: "g", To: comb.SeekStart}); err != nil {
		log.Fatal(err)
	}
	seek := time.Since(start)
	start = time.Now()
	if got, err := c.Pop(ctx, queue, comb.PopOptions{Group: "g", Max: 1, AutoAck: true}); err != nil || len(got) != 1 {
		log.Fatalf("the first pop after the seek: %d messages, %v", len(got), err)
	}
	seekPop := time.Since(start)
	// And group s, made from the start with one pop, sought to the end of
	// every partition.
	start = time.Now()
	if _, err := c.Seek(ctx, queue, comb.SeekOptions{Group: "s", To: comb.SeekEnd}); err != nil {
		log.Fatal(err)
	}
	seekEnd := time.Since(start)
	// Group g again, to a time before every message, then to one between
	// the partitions' first messages and the timed pops' messages, each
	// with its first pop.
	seekTime := func(at time.Time) (seek, pop time.Duration) {
		start := time.Now()
		if _, err := c.Seek(ctx, queue, comb.SeekOptions{Group: "g", To: comb.SeekTime(at)}); err != nil {
			log.Fatal(err)
		}
		seek, start = time.Since(start), time.Now()
		if got, err := c.Pop(ctx, queue, comb.PopOptions{Group: "g", Max: 1, AutoAck: true}); err != nil || len(got) != 1 {
			log.Fatalf("the first pop after the seek to a time: %d messages, %v", len(got), err)
		}
		return seek, time.Since(start)
	}
	seekBefore, popBefore := seekTime(beforeAll)
	seekMidway, popMidway := seekTime(midway)

	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	fmt.Printf("scale: %d partitions (%d with messages, %d groups before): created in %s, a new group's first pop %s (from the start %s), pop p50 %s p99 %s over %d pops, db %s, %s cursor rows, broker rss %s, ready set %s rows, a seek back to the start %s and its first pop %s, a seek of a new group to the end %s, of g to a time before every message %s (first pop %s) and to one midway %s (first pop %s)\n",
		*parts, ready, *groups, ms(created), ms(firstPop), ms(firstAll),
		q(0.50).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), len(lat), db, cursors, rss, readyBefore,
		ms(seek), ms(seekPop), ms(seekEnd), ms(seekBefore), ms(popBefore), ms(seekMidway), ms(popMidway))
}

// readyRows is the size of the ready set (comb_ready, migration 0012) when
// the timed pops start, and since the set is by group (migration 0014)
// how many of its rows a pop of group g that reads the set reads (g's and
// the pushes'): before 0014, a pop read them all. It is "-" without
// -postgres-url or on a revision before the set.
func readyRows(ctx context.Context, url string) string {
	if url == "" {
		return "-"
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	var n, g int64
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE group_name IN ('g', '')) FROM comb_ready`).Scan(&n, &g); err == nil {
		return fmt.Sprintf("%d (%d of them g's or pushes')", n, g)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM comb_ready`).Scan(&n); err != nil {
		return "-"
	}
	return fmt.Sprint(n)
}
