package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/protocol"
)

// The commands for people, each over one verb of the protocol
// (docs/protocol.md) through the Go client.

func init() {
	for _, c := range []opsCommand{queuesCmd, infoCmd, pushCmd, popCmd, tailCmd, ackCmd, groupsCmd, dlqCmd, configureCmd, seekCmd, deleteCmd} {
		registerOps(c)
	}
}

var queuesCmd = opsCommand{
	name: "queues", summary: "list the queues with their partitions, messages and backlog",
	synopsis: "List every queue: partitions, messages and bytes retained, consumer groups, and the\nlargest backlog (pending) of any group.",
	minArgs:  0, maxArgs: 0,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		return func(ctx context.Context, s *session, _ []string) error {
			var qs []comb.QueueSummary
			if err := s.call(ctx, "", func(ctx context.Context, c *comb.Client) (err error) {
				qs, err = c.List(ctx)
				return err
			}); err != nil {
				return err
			}
			if s.json {
				return s.printJSON(protocol.ListReply{Queues: nonNil(qs)})
			}
			if len(qs) == 0 {
				s.note("no queues yet: `comb push QUEUE DATA` creates one")
				return nil
			}
			rows := make([][]string, len(qs))
			for i, q := range qs {
				rows[i] = []string{q.Name, num(q.Partitions), num(q.Messages), num(q.Bytes), num(q.Groups), num(q.Pending)}
			}
			s.table([]string{"QUEUE", "PARTITIONS", "MESSAGES", "BYTES", "GROUPS", "PENDING"}, rows)
			return nil
		}
	},
}

var infoCmd = opsCommand{
	name: "info", args: "QUEUE", summary: "a queue's settings, partitions and groups",
	synopsis: "Show a queue's figures (messages and bytes retained, dead letters), its partitions\n(next offset, oldest retained offset), its consumer groups (messages pending,\npartitions leased) and its settings.",
	minArgs:  1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		var limit int
		fs.IntVar(&limit, "limit", 100, fmt.Sprintf("show the first partitions and groups, this many of each by name (1 to %d); 0 shows them all", protocol.MaxInfoLimit))
		return func(ctx context.Context, s *session, args []string) error {
			if limit < 0 || limit > protocol.MaxInfoLimit {
				return exitError{2, fmt.Sprintf("--limit %d: want 0 (all) or 1 to %d", limit, protocol.MaxInfoLimit)}
			}
			info, err := s.info(ctx, args[0], limit)
			if err != nil {
				return err
			}
			if s.json {
				return s.printJSON(info)
			}
			if info.Next != "" {
				defer s.note("showing the first %d of %s partitions and %d of %s groups: --limit 0 shows them all",
					len(info.Partitions), num(info.PartitionCount), len(info.Groups), num(info.GroupCount))
			}
			fmt.Fprintf(s.env.Stdout, "Queue %s, created %s\n%s messages, %s bytes, %s dead letters\n\n",
				info.Name, info.CreatedAt.Local().Format(time.DateTime), num(info.Messages), num(info.Bytes), num(info.DeadLetters))
			rows := make([][]string, len(info.Partitions))
			for i, p := range info.Partitions {
				rows[i] = []string{p.Name, num(p.NextOffset), num(p.LowOffset)}
			}
			s.table([]string{"PARTITION", "NEXT OFFSET", "LOW OFFSET"}, rows)
			fmt.Fprintln(s.env.Stdout)
			if len(info.Groups) == 0 {
				fmt.Fprintln(s.env.Stdout, "No consumer group yet.")
			} else {
				s.table([]string{"GROUP", "PENDING", "LEASED"}, groupRows(info.Groups))
			}
			fmt.Fprintln(s.env.Stdout)
			s.settingsTable(info.Config)
			return nil
		}
	},
}

// info reads a queue's info with its first limit partitions and groups,
// or with all of them when limit is 0.
func (s *session) info(ctx context.Context, queue string, limit int) (info comb.Info, err error) {
	err = s.call(ctx, queue, func(ctx context.Context, c *comb.Client) (err error) {
		if limit == 0 {
			info, err = c.Info(ctx, queue)
		} else {
			info, err = c.InfoPage(ctx, queue, comb.PageQuery{Limit: limit})
		}
		return err
	})
	return info, err
}

func groupRows(gs []comb.GroupInfo) [][]string {
	rows := make([][]string, len(gs))
	for i, g := range gs {
		rows[i] = []string{g.Name, num(g.Pending), num(g.Leased)}
	}
	return rows
}

var groupsCmd = opsCommand{
	name: "groups", args: "QUEUE", summary: "a queue's consumer groups and their lag, or delete one (--delete)",
	synopsis: "List the consumer groups of a queue: the messages each has not completed yet\n(pending), the partitions it holds a lease on (leased), its dead letters (dead)\nand the age of its oldest pending message (oldest). With --delete GROUP, delete\nthat group with its cursors, leases and dead letters, so it no longer holds back\ncompleted retention (asks first unless --force).",
	minArgs:  1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		var del string
		var force bool
		fs.StringVar(&del, "delete", "", "delete this consumer group")
		fs.BoolVarP(&force, "force", "f", false, "with --delete: delete without asking")
		return func(ctx context.Context, s *session, args []string) error {
			queue := args[0]
			if fs.Changed("delete") {
				return s.deleteGroup(ctx, queue, del, force)
			}
			var gs []comb.GroupState
			if err := s.call(ctx, queue, func(ctx context.Context, c *comb.Client) (err error) {
				gs, err = c.Groups(ctx, queue)
				return err
			}); err != nil {
				return err
			}
			if s.json {
				return s.printJSON(protocol.GroupsReply{Groups: nonNil(gs)})
			}
			if len(gs) == 0 {
				s.note("queue %s has no consumer group yet: the first pop makes one", queue)
				return nil
			}
			rows := make([][]string, len(gs))
			for i, g := range gs {
				rows[i] = []string{g.Name, num(g.Pending), num(g.Leased), num(g.Dead), ageText(g.OldestPendingAgeS)}
			}
			s.table([]string{"GROUP", "PENDING", "LEASED", "DEAD", "OLDEST"}, rows)
			return nil
		}
	},
}

// ageText shows an age in seconds as a duration, "-" for none.
func ageText(sec float64) string {
	if sec <= 0 {
		return "-"
	}
	d := time.Duration(sec * float64(time.Second))
	if d >= time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

func (s *session) deleteGroup(ctx context.Context, queue, group string, force bool) error {
	if err := protocol.ValidateName("--delete", group); err != nil {
		return usagef("%s", err.(*protocol.Error).Message)
	}
	if !force {
		if s.env.Terminal == nil || !s.env.Terminal() {
			return exitError{2, fmt.Sprintf("not deleting group %s of queue %s: standard input is not a terminal to ask on; pass --force to delete without asking", group, queue)}
		}
		fmt.Fprintf(s.env.Stderr, "delete group %s of queue %s, with its cursors and dead letters? [y/N] ", group, queue)
		answer, _ := bufio.NewReader(stdinOf(s.env)).ReadString('\n')
		switch strings.ToLower(strings.TrimSpace(answer)) {
		case "y", "yes":
		default:
			return exitError{1, fmt.Sprintf("group %s not deleted", group)}
		}
	}
	if err := s.call(ctx, queue, func(ctx context.Context, c *comb.Client) error {
		err := c.DeleteGroup(ctx, queue, group)
		if pe, ok := protocol.AsError(err); ok && pe.Code == protocol.CodeNotFound && strings.HasPrefix(pe.Message, "group ") {
			return exitError{1, fmt.Sprintf("queue %s has no group %s; `comb groups %s` lists them", queue, group, queue)}
		}
		return err
	}); err != nil {
		return err
	}
	if s.json {
		return s.printJSON(protocol.OKReply{OK: true})
	}
	fmt.Fprintf(s.env.Stdout, "deleted group %s of queue %s\n", group, queue)
	return nil
}

// pushBatch bounds the messages and bytes of one push request when push
// reads lines: well inside the protocol's limits, base64 included.
const (
	pushBatchMessages = 1000
	pushBatchBytes    = 2 << 20
)

var pushCmd = opsCommand{
	name: "push", args: "QUEUE [DATA|-]", summary: "push a message, or one per line of standard input",
	synopsis: "Push DATA as one message (sent as is, as a put), or with - or no DATA, each line\nof standard input as a message (blank lines are skipped), in batches. The reply\ncomes once the messages are durable. A push creates the queue if needed.",
	minArgs:  1, maxArgs: 2,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		var partition, id string
		fs.StringVarP(&partition, "partition", "p", "", "partition of the messages (default \"default\")")
		fs.StringVar(&id, "id", "", "producer id of the message, for deduplication (with DATA only)")
		return func(ctx context.Context, s *session, args []string) error {
			queue := args[0]
			if partition != "" {
				if err := protocol.ValidateName("--partition", partition); err != nil {
					return usagef("%s", err.(*protocol.Error).Message)
				}
			}
			if id != "" {
				if err := protocol.ValidateText("--id", id, protocol.MaxIDBytes); err != nil {
					return usagef("%s", err.(*protocol.Error).Message)
				}
			}
			if len(args) == 2 && args[1] != "-" {
				var res comb.PushResult
				if err := s.call(ctx, queue, func(ctx context.Context, c *comb.Client) (err error) {
					res, err = c.Put(ctx, queue, []byte(args[1]), comb.PutOptions{Partition: partition, ID: id})
					return err
				}); err != nil {
					return err
				}
				if s.json {
					return s.printJSON(protocol.PushReply{Results: []comb.PushResult{res}})
				}
				fmt.Fprintf(s.env.Stdout, "%s %s/%d (%s)\n", queue, res.Partition, res.Offset, res.Status)
				return nil
			}
			if id != "" {
				return usagef("--id names one message: give DATA, not lines of standard input")
			}
			if s.env.Terminal != nil && s.env.Terminal() {
				s.note("reading messages from standard input, one per line; end with Ctrl-D")
			}
			return s.pushLines(ctx, queue, partition)
		}
	},
}

// pushLines pushes each non-blank line of standard input.
func (s *session) pushLines(ctx context.Context, queue, partition string) error {
	in := s.env.Stdin
	if in == nil {
		in = strings.NewReader("")
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), protocol.MaxMessageBytes+1)
	var (
		all   []comb.PushResult
		batch []comb.Message
		size  int
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var res []comb.PushResult
		if err := s.call(ctx, queue, func(ctx context.Context, c *comb.Client) (err error) {
			res, err = c.Push(ctx, queue, batch)
			return err
		}); err != nil {
			if len(all) > 0 {
				s.note("%d messages were pushed before this error", len(all))
			}
			return err
		}
		all = append(all, res...)
		batch, size = nil, 0
		return nil
	}
	line := 0
	for sc.Scan() {
		line++
		b := []byte(strings.TrimSuffix(sc.Text(), "\r"))
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		batch = append(batch, comb.Message{Partition: partition, Data: b})
		size += len(b)
		if len(batch) >= pushBatchMessages || size >= pushBatchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line %d is longer than %d bytes, the largest message", line+1, protocol.MaxMessageBytes)
		}
		if ferr := flush(); ferr != nil {
			return ferr
		}
		return fmt.Errorf("standard input: %w (%d messages pushed before it)", err, len(all))
	}
	if err := flush(); err != nil {
		return err
	}
	if s.json {
		return s.printJSON(protocol.PushReply{Results: nonNil(all)})
	}
	if len(all) == 0 {
		s.note("no lines on standard input: nothing pushed")
		return nil
	}
	stored := 0
	parts := map[string][2]int64{}
	for _, r := range all {
		if r.Status == comb.StatusStored {
			stored++
		}
		span, ok := parts[r.Partition]
		if !ok {
			span = [2]int64{r.Offset, r.Offset}
		}
		span[0], span[1] = min(span[0], r.Offset), max(span[1], r.Offset)
		parts[r.Partition] = span
	}
	names := make([]string, 0, len(parts))
	for p := range parts {
		names = append(names, p)
	}
	sort.Strings(names)
	spans := make([]string, len(names))
	for i, p := range names {
		spans[i] = fmt.Sprintf("%s/%d-%d", p, parts[p][0], parts[p][1])
	}
	fmt.Fprintf(s.env.Stdout, "%s: %d messages pushed, %d stored, %d duplicates, offsets %s\n",
		queue, len(all), stored, len(all)-stored, strings.Join(spans, " "))
	return nil
}

// popFlags are the options pop and tail share.
type popFlags struct {
	group, partition, from string
	max                    int
	lease                  time.Duration
}

func (p *popFlags) bind(fs *pflag.FlagSet, defMax int) {
	fs.StringVarP(&p.group, "group", "g", protocol.DefaultGroup, "consumer group")
	fs.StringVarP(&p.partition, "partition", "p", "", "pop from this partition only (default: any partition with messages ready)")
	fs.IntVarP(&p.max, "max", "n", defMax, "most messages per pop")
	fs.DurationVar(&p.lease, "lease", 0, "lease time (default: the queue's lease_ms)")
	fs.StringVar(&p.from, "from", "", "where a group new to a partition starts: all, new or an RFC 3339 time (default all)")
}

func (p *popFlags) options() (comb.PopOptions, error) {
	if err := protocol.ValidateName("--group", p.group); err != nil {
		return comb.PopOptions{}, usagef("%s", err.(*protocol.Error).Message)
	}
	if p.partition != "" {
		if err := protocol.ValidateName("--partition", p.partition); err != nil {
			return comb.PopOptions{}, usagef("%s", err.(*protocol.Error).Message)
		}
	}
	if p.max < 1 || p.max > protocol.MaxPopMessages {
		return comb.PopOptions{}, usagef("--max %d: want 1 to %d", p.max, protocol.MaxPopMessages)
	}
	if p.lease != 0 && (p.lease < protocol.MinLeaseMS*time.Millisecond || p.lease > protocol.MaxLeaseMS*time.Millisecond) {
		return comb.PopOptions{}, usagef("--lease %s: want %s to %s", p.lease, protocol.MinLeaseMS*time.Millisecond, protocol.MaxLeaseMS*time.Millisecond)
	}
	switch p.from {
	case "", comb.FromAll, comb.FromNew:
	default:
		t, err := time.Parse(time.RFC3339Nano, p.from)
		if err != nil {
			return comb.PopOptions{}, usagef("--from %q: want all, new or an RFC 3339 time such as 2026-11-30T16:00:00Z", p.from)
		}
		p.from = comb.FromTime(t)
	}
	return comb.PopOptions{Group: p.group, Partition: p.partition, Max: p.max, Lease: p.lease, From: p.from}, nil
}

var popCmd = opsCommand{
	name: "pop", args: "QUEUE", summary: "lease the next messages of a queue for a group",
	synopsis: "Lease the next messages of a queue for a consumer group and print them. Settle\nthem with `comb ack` before the lease ends (the lease is printed), or they are\ndelivered again; --auto-ack settles them on delivery (at most once).",
	minArgs:  1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		var p popFlags
		var wait time.Duration
		var autoAck bool
		p.bind(fs, 1)
		fs.DurationVarP(&wait, "wait", "w", 0, "wait this long for a message when none is ready")
		fs.BoolVar(&autoAck, "auto-ack", false, "settle the messages on delivery")
		return func(ctx context.Context, s *session, args []string) error {
			queue := args[0]
			opts, err := p.options()
			if err != nil {
				return err
			}
			if wait < 0 || wait > protocol.MaxWaitMS*time.Millisecond {
				return usagef("--wait %s: want 0 to %s", wait, protocol.MaxWaitMS*time.Millisecond)
			}
			opts.Wait, opts.AutoAck = wait, autoAck
			var ds []comb.Delivery
			if err := s.call(ctx, queue, func(ctx context.Context, c *comb.Client) (err error) {
				ds, err = c.Pop(ctx, queue, opts)
				return err
			}); err != nil {
				return err
			}
			if s.json {
				out := protocol.PopReply{Messages: make([]protocol.Delivery, len(ds))}
				for i, d := range ds {
					out.Messages[i] = wireDelivery(d)
				}
				return s.printJSON(out)
			}
			if len(ds) == 0 {
				s.note("no message ready in %s for group %s", queue, opts.Group)
				return nil
			}
			rows := make([][]string, len(ds))
			for i, d := range ds {
				rows[i] = []string{d.Partition, num(d.Offset), strconv.Itoa(d.Attempt), orDash(d.Lease), display(d.Data)}
			}
			s.table([]string{"PARTITION", "OFFSET", "ATTEMPT", "LEASE", "DATA"}, rows)
			if !autoAck {
				last := ds[len(ds)-1]
				s.note("settle with: comb ack %s %s %d %s%s", queue, last.Partition, last.Offset, last.Lease, groupFlag(opts.Group))
			}
			return nil
		}
	},
}

func groupFlag(g string) string {
	if g == protocol.DefaultGroup {
		return ""
	}
	return " --group " + g
}

var tailCmd = opsCommand{
	name: "tail", args: "QUEUE", summary: "follow a queue as a group, printing messages (Ctrl-C stops)",
	synopsis: "Follow a queue as a consumer group: print each message as it arrives, as\n\"partition/offset data\" (with --json, one JSON object per line), and settle\nit (completed) once printed. Every group gets every message, so a group of\nits own (--group) watches a queue without taking messages from its consumers.\nWith --no-ack nothing is settled: messages stay leased and come again once\ntheir lease ends, and those still leased when tail stops are handed back.\nCtrl-C stops.",
	minArgs:  1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		var p popFlags
		var noAck bool
		p.bind(fs, protocol.DefaultPopMax)
		fs.BoolVar(&noAck, "no-ack", false, "print without settling")
		return func(ctx context.Context, s *session, args []string) error {
			opts, err := p.options()
			if err != nil {
				return err
			}
			return s.tail(ctx, args[0], opts, noAck)
		}
	},
}

// tailWait is each long poll of tail. A push wakes a poll at once, so it
// bounds only how long a stop waits for the poll in flight: a stop lets that
// poll end, rather than cancel it, since a pop cancelled while it waits may
// still lease messages on the broker that nobody would receive.
const tailWait = 500 * time.Millisecond

// tailGrace bounds how long a request of tail outlives a stop.
const tailGrace = 900 * time.Millisecond

// graceContext returns a context for one request of tail: not cancelled with
// ctx but tailGrace after it, and bounded by the request timeout.
func (s *session) graceContext(ctx context.Context) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.conn.timeout+tailWait)
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(tailGrace, cancel) })
	return rctx, func() { stop(); cancel() }
}

func (s *session) tail(ctx context.Context, queue string, opts comb.PopOptions, noAck bool) error {
	opts.Wait = tailWait
	type held struct {
		partition, lease string
		first            int64
	}
	var kept []held
	seen := map[string]bool{}
	defer func() {
		// Hand back what --no-ack kept, without spending an attempt.
		if len(kept) == 0 || s.client == nil {
			return
		}
		acks := make([]comb.Ack, len(kept))
		for i, h := range kept {
			acks[i] = comb.Ack{Partition: h.partition, Offset: h.first, Lease: h.lease, Status: comb.AckRetry}
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tailGrace)
		defer cancel()
		if _, err := s.client.Ack(actx, queue, opts.Group, acks); err != nil {
			s.note("handing back the leased messages: %v; they come again once their lease ends", s.explain(err, queue))
		}
	}()
	enc := json.NewEncoder(s.env.Stdout)
	enc.SetEscapeHTML(false)
	for ctx.Err() == nil {
		var ds []comb.Delivery
		pctx, done := s.graceContext(ctx)
		err := s.callRaw(pctx, func(ctx context.Context, c *comb.Client) (err error) {
			ds, err = c.Pop(ctx, queue, opts)
			return err
		})
		done()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if !transient(err) {
				return s.explain(err, queue)
			}
			s.note("%v; trying again", s.explain(err, queue))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for _, d := range ds {
			if s.json {
				if err := enc.Encode(wireDelivery(d)); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(s.env.Stdout, "%s/%d %s\n", d.Partition, d.Offset, display(d.Data))
			}
		}
		// One cumulative ack per lease, at its last offset.
		var acks []comb.Ack
		for i, d := range ds {
			if i+1 < len(ds) && ds[i+1].Lease == d.Lease {
				continue
			}
			acks = append(acks, comb.Ack{Partition: d.Partition, Offset: d.Offset, Lease: d.Lease, Status: comb.AckCompleted})
		}
		if noAck {
			for i, d := range ds {
				if !seen[d.Lease] {
					seen[d.Lease] = true
					kept = append(kept, held{d.Partition, d.Lease, ds[i].Offset})
				}
			}
			continue
		}
		if len(acks) == 0 {
			continue
		}
		// The ack outlives a Ctrl-C that comes while it is on its way.
		actx, done := s.graceContext(ctx)
		res, err := s.client.Ack(actx, queue, opts.Group, acks)
		done()
		if err != nil {
			s.note("ack: %v; those messages come again once their lease ends", s.explain(err, queue))
			continue
		}
		for i, r := range res {
			if !r.OK {
				s.note("ack %s/%d refused: %s", acks[i].Partition, acks[i].Offset, r.Error)
			}
		}
	}
	return nil
}

var ackStatuses = []string{comb.AckCompleted, comb.AckRetry, comb.AckFailed, comb.AckDead}

var ackCmd = opsCommand{
	name: "ack", args: "QUEUE PARTITION OFFSET LEASE", summary: "settle a leased message (and the earlier ones of its lease)",
	synopsis: "Settle a message that `comb pop` leased, and every earlier message of the same\nlease: completed (the default), retry (deliver again, no attempt spent), failed\n(deliver again, one attempt spent; dead-lettered after max_attempts) or dead.",
	minArgs:  4, maxArgs: 4,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		var group, status string
		fs.StringVarP(&group, "group", "g", protocol.DefaultGroup, "consumer group the lease belongs to")
		fs.StringVar(&status, "status", comb.AckCompleted, "completed, retry, failed or dead")
		return func(ctx context.Context, s *session, args []string) error {
			queue, partition := args[0], args[1]
			offset, err := strconv.ParseInt(args[2], 10, 64)
			if err != nil || offset < 0 {
				return usagef("OFFSET %q: want a whole number, as `comb pop` printed it", args[2])
			}
			if !contains(ackStatuses, status) {
				return usagef("--status %q: want %s", status, strings.Join(ackStatuses, ", "))
			}
			var res []comb.AckResult
			if err := s.call(ctx, queue, func(ctx context.Context, c *comb.Client) (err error) {
				res, err = c.Ack(ctx, queue, group, []comb.Ack{{Partition: partition, Offset: offset, Lease: args[3], Status: status}})
				return err
			}); err != nil {
				return err
			}
			r := res[0]
			if s.json {
				if err := s.printJSON(protocol.AckResult{OK: r.OK, Error: r.Error}); err != nil {
					return err
				}
			}
			if !r.OK {
				return exitError{1, fmt.Sprintf("ack refused: %s; pop again to get a live lease", r.Error)}
			}
			if !s.json {
				fmt.Fprintf(s.env.Stdout, "%s %s/%d %s\n", queue, partition, offset, status)
			}
			return nil
		}
	},
}

var dlqCmd = opsCommand{
	name: "dlq", args: "QUEUE [list|replay ID…|purge ID…]", summary: "a queue's dead letters: list, replay, purge",
	synopsis: "List a queue's dead letters (the default), replay some (push them again as new\nmessages, which every group receives) or purge them, by the ids the list shows.",
	minArgs:  1, maxArgs: -1,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		var group string
		var limit int
		fs.StringVarP(&group, "group", "g", "", "list the dead letters of this group only")
		fs.IntVarP(&limit, "limit", "n", 100, "list at most this many")
		return func(ctx context.Context, s *session, args []string) error {
			queue, verb, ids := args[0], "list", []string(nil)
			if len(args) > 1 {
				verb, ids = args[1], args[2:]
			}
			switch verb {
			case "list":
				if len(ids) > 0 {
					return usagef("list takes no ids")
				}
				if limit < 1 {
					return usagef("--limit %d: want at least 1", limit)
				}
				return s.dlqList(ctx, queue, group, limit)
			case "replay", "purge":
				if len(ids) == 0 {
					return usagef("%s wants the ids of the dead letters (`comb dlq %s` lists them)", verb, queue)
				}
				if len(ids) > protocol.MaxDLQIDs {
					return usagef("%d ids: at most %d at once", len(ids), protocol.MaxDLQIDs)
				}
				var n int
				if err := s.call(ctx, queue, func(ctx context.Context, c *comb.Client) (err error) {
					if verb == "replay" {
						n, err = c.Replay(ctx, queue, ids)
					} else {
						n, err = c.Purge(ctx, queue, ids)
					}
					return err
				}); err != nil {
					return err
				}
				if s.json {
					return s.printJSON(protocol.DoneReply{Done: n})
				}
				past := map[string]string{"replay": "replayed", "purge": "purged"}[verb]
				fmt.Fprintf(s.env.Stdout, "%s %d of %d dead letters\n", past, n, len(ids))
				if n < len(ids) {
					s.note("the others were not dead letters of %s (any more)", queue)
				}
				return nil
			}
			return usagef("unknown dlq action %q: want list, replay or purge", verb)
		}
	},
}

func (s *session) dlqList(ctx context.Context, queue, group string, limit int) error {
	var all []comb.DeadLetter
	next := ""
	for {
		page := min(limit-len(all), protocol.MaxDLQLimit)
		var got []comb.DeadLetter
		if err := s.call(ctx, queue, func(ctx context.Context, c *comb.Client) (err error) {
			got, next, err = c.DeadLetters(ctx, queue, comb.DeadLetterQuery{Group: group, Limit: page, After: next})
			return err
		}); err != nil {
			return err
		}
		all = append(all, got...)
		if next == "" || len(all) >= limit {
			break
		}
	}
	if s.json {
		out := protocol.DLQReply{DeadLetters: make([]protocol.DeadLetter, len(all)), Next: next}
		for i, d := range all {
			w := protocol.DeadLetter{DLQID: d.DLQID, Group: d.Group, Partition: d.Partition, Offset: d.Offset, ID: d.ID,
				Attempts: d.Attempts, Reason: d.Reason, DeadAt: d.DeadAt}
			w.Data, w.DataB64 = wireData(d.Data)
			out.DeadLetters[i] = w
		}
		return s.printJSON(out)
	}
	if len(all) == 0 {
		s.note("no dead letters in %s", queue)
		return nil
	}
	rows := make([][]string, len(all))
	for i, d := range all {
		rows[i] = []string{d.DLQID, d.Group, d.Partition, num(d.Offset), strconv.Itoa(d.Attempts), d.Reason,
			d.DeadAt.Local().Format(time.DateTime), display(d.Data)}
	}
	s.table([]string{"ID", "GROUP", "PARTITION", "OFFSET", "ATTEMPTS", "REASON", "DEAD AT", "DATA"}, rows)
	if next != "" {
		s.note("more dead letters than --limit %d", limit)
	}
	return nil
}

// setting is one queue setting of docs/protocol.md, for configure.
type setting struct {
	key  string
	unit time.Duration // for _ms and _s keys: a value may be a duration
	get  func(comb.Config) string
	set  func(*comb.ConfigPatch, string) error
}

func intSetting(key string, unit time.Duration, get func(comb.Config) int64, field func(*comb.ConfigPatch) **int64) setting {
	return setting{key: key, unit: unit,
		get: func(c comb.Config) string { return strconv.FormatInt(get(c), 10) },
		set: func(p *comb.ConfigPatch, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil && unit != 0 {
				d, derr := time.ParseDuration(v)
				if derr == nil && d%unit == 0 {
					n, err = int64(d/unit), nil
				}
			}
			if err != nil {
				if unit != 0 {
					return fmt.Errorf("want a whole number of %s or a duration such as 30s", unitName(unit))
				}
				return errors.New("want a whole number")
			}
			*field(p) = &n
			return nil
		}}
}

func unitName(u time.Duration) string {
	if u == time.Millisecond {
		return "milliseconds"
	}
	return "seconds"
}

// settings are the queue settings in the order of docs/protocol.md.
var settings = []setting{
	intSetting("lease_ms", time.Millisecond, func(c comb.Config) int64 { return c.LeaseMS }, func(p *comb.ConfigPatch) **int64 { return &p.LeaseMS }),
	intSetting("max_attempts", 0, func(c comb.Config) int64 { return c.MaxAttempts }, func(p *comb.ConfigPatch) **int64 { return &p.MaxAttempts }),
	{key: "dead_letter",
		get: func(c comb.Config) string { return strconv.FormatBool(c.DeadLetter) },
		set: func(p *comb.ConfigPatch, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return errors.New("want true or false")
			}
			p.DeadLetter = &b
			return nil
		}},
	intSetting("retry_delay_ms", time.Millisecond, func(c comb.Config) int64 { return c.RetryDelayMS }, func(p *comb.ConfigPatch) **int64 { return &p.RetryDelayMS }),
	intSetting("retry_backoff_pct", 0, func(c comb.Config) int64 { return c.RetryBackoffPct }, func(p *comb.ConfigPatch) **int64 { return &p.RetryBackoffPct }),
	intSetting("retry_delay_max_ms", time.Millisecond, func(c comb.Config) int64 { return c.RetryDelayMaxMS }, func(p *comb.ConfigPatch) **int64 { return &p.RetryDelayMaxMS }),
	intSetting("dedup_window_s", time.Second, func(c comb.Config) int64 { return c.DedupWindowS }, func(p *comb.ConfigPatch) **int64 { return &p.DedupWindowS }),
	intSetting("completed_retention_s", time.Second, func(c comb.Config) int64 { return c.CompletedRetentionS }, func(p *comb.ConfigPatch) **int64 { return &p.CompletedRetentionS }),
	intSetting("max_age_s", time.Second, func(c comb.Config) int64 { return c.MaxAgeS }, func(p *comb.ConfigPatch) **int64 { return &p.MaxAgeS }),
	intSetting("delay_ms", time.Millisecond, func(c comb.Config) int64 { return c.DelayMS }, func(p *comb.ConfigPatch) **int64 { return &p.DelayMS }),
	intSetting("max_messages", 0, func(c comb.Config) int64 { return c.MaxMessages }, func(p *comb.ConfigPatch) **int64 { return &p.MaxMessages }),
	intSetting("max_bytes", 0, func(c comb.Config) int64 { return c.MaxBytes }, func(p *comb.ConfigPatch) **int64 { return &p.MaxBytes }),
	intSetting("max_message_bytes", 0, func(c comb.Config) int64 { return c.MaxMessageBytes }, func(p *comb.ConfigPatch) **int64 { return &p.MaxMessageBytes }),
}

func settingKeys() string {
	keys := make([]string, len(settings))
	for i, st := range settings {
		keys[i] = st.key
	}
	return strings.Join(keys, ", ")
}

func (s *session) settingsTable(c comb.Config) {
	rows := make([][]string, len(settings))
	for i, st := range settings {
		rows[i] = []string{st.key, st.get(c)}
	}
	s.table([]string{"SETTING", "VALUE"}, rows)
}

var configureCmd = opsCommand{
	name: "configure", args: "QUEUE KEY=VALUE…", summary: "change a queue's settings (creates the queue if needed)",
	synopsis: "Change settings of a queue, creating it if needed; settings not named keep their\nvalue. The keys are those of docs/protocol.md (\"Queue settings\"):\n" +
		"lease_ms, max_attempts, dead_letter, retry_delay_ms, retry_backoff_pct,\nretry_delay_max_ms, dedup_window_s, completed_retention_s, max_age_s, delay_ms,\nmax_messages, max_bytes, max_message_bytes.\n" +
		"A value is a whole number, true or false for dead_letter, and for the _ms and _s\nkeys also a duration: lease_ms=1m, dedup_window_s=1h. `comb info` shows them all.",
	minArgs: 2, maxArgs: -1,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		return func(ctx context.Context, s *session, args []string) error {
			queue := args[0]
			var patch comb.ConfigPatch
			seen := map[string]bool{}
			for _, kv := range args[1:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usagef("%q: want KEY=VALUE, such as max_attempts=5", kv)
				}
				i := sortIndex(k)
				if i < 0 {
					return usagef("unknown setting %q; the settings are %s", k, settingKeys())
				}
				if seen[k] {
					return usagef("%s is given twice", k)
				}
				seen[k] = true
				if err := settings[i].set(&patch, v); err != nil {
					return usagef("%s=%q: %v", k, v, err)
				}
			}
			var cfg comb.Config
			if err := s.call(ctx, queue, func(ctx context.Context, c *comb.Client) (err error) {
				cfg, err = c.Configure(ctx, queue, patch)
				return err
			}); err != nil {
				return err
			}
			if s.json {
				return s.printJSON(cfg)
			}
			s.settingsTable(cfg)
			return nil
		}
	},
}

func sortIndex(key string) int {
	for i, st := range settings {
		if st.key == key {
			return i
		}
	}
	return -1
}

var seekCmd = opsCommand{
	name: "seek", args: "QUEUE", summary: "move a group's cursors to the start, the end or a time",
	synopsis: "Move a consumer group's cursors, on every partition or on one, to the start (the\noldest retained message), the end (only later pushes are delivered) or a time:\nan RFC 3339 time, or a duration meaning that long ago (--to 1h). The group's\nleases end there. Seeking back delivers messages again.",
	minArgs:  1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		var group, to, partition string
		fs.StringVarP(&group, "group", "g", "", "consumer group whose cursors move (required)")
		fs.StringVar(&to, "to", "", "start, end, an RFC 3339 time or a duration ago (required)")
		fs.StringVarP(&partition, "partition", "p", "", "this partition only (default: every partition)")
		return func(ctx context.Context, s *session, args []string) error {
			queue := args[0]
			if group == "" {
				return usagef("--group is required: the group whose cursors move")
			}
			if err := protocol.ValidateName("--group", group); err != nil {
				return usagef("%s", err.(*protocol.Error).Message)
			}
			target, err := seekTarget(to, time.Now())
			if err != nil {
				return err
			}
			var moved int
			if err := s.call(ctx, queue, func(ctx context.Context, c *comb.Client) (err error) {
				moved, err = c.Seek(ctx, queue, comb.SeekOptions{Group: group, Partition: partition, To: target})
				return err
			}); err != nil {
				return err
			}
			if s.json {
				return s.printJSON(protocol.SeekReply{Moved: moved})
			}
			fmt.Fprintf(s.env.Stdout, "%s: moved %d cursors of group %s to %s\n", queue, moved, group, target)
			return nil
		}
	},
}

// seekTarget turns --to into the protocol's "to".
func seekTarget(to string, now time.Time) (string, error) {
	switch to {
	case "":
		return "", usagef("--to is required: start, end, an RFC 3339 time or a duration ago such as 1h")
	case comb.SeekStart, comb.SeekEnd:
		return to, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, to); err == nil {
		return comb.SeekTime(t), nil
	}
	if d, err := time.ParseDuration(to); err == nil && d > 0 {
		return comb.SeekTime(now.Add(-d)), nil
	}
	return "", usagef("--to %q: want start, end, an RFC 3339 time such as 2026-11-30T16:00:00Z or a duration ago such as 1h", to)
}

var deleteCmd = opsCommand{
	name: "delete", args: "QUEUE", summary: "delete a queue and all its messages (asks first unless --force)",
	synopsis: "Delete a queue with all its messages, cursors and dead letters. On a terminal it\nasks first; otherwise it wants --force.",
	minArgs:  1, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		var force bool
		fs.BoolVarP(&force, "force", "f", false, "delete without asking")
		return func(ctx context.Context, s *session, args []string) error {
			queue := args[0]
			if !force {
				if s.env.Terminal == nil || !s.env.Terminal() {
					return exitError{2, fmt.Sprintf("not deleting queue %s: standard input is not a terminal to ask on; pass --force to delete without asking", queue)}
				}
				// A queue that does not exist is an error before the question.
				if _, err := s.info(ctx, queue, 1); err != nil {
					return err
				}
				fmt.Fprintf(s.env.Stderr, "delete queue %s and all its messages? [y/N] ", queue)
				answer, _ := bufio.NewReader(stdinOf(s.env)).ReadString('\n')
				switch strings.ToLower(strings.TrimSpace(answer)) {
				case "y", "yes":
				default:
					return exitError{1, fmt.Sprintf("queue %s not deleted", queue)}
				}
			}
			if err := s.call(ctx, queue, func(ctx context.Context, c *comb.Client) error {
				return c.Delete(ctx, queue)
			}); err != nil {
				return err
			}
			if s.json {
				return s.printJSON(protocol.OKReply{OK: true})
			}
			fmt.Fprintf(s.env.Stdout, "deleted queue %s\n", queue)
			return nil
		}
	},
}

// transient reports whether a failed request of tail is worth trying
// again: the broker is busy, stopping or not answering in time.
func transient(err error) bool {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Temporary()
	}
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrNoResponders)
}

func stdinOf(env Env) io.Reader {
	if env.Stdin == nil {
		return strings.NewReader("")
	}
	return env.Stdin
}

// wireDelivery is the wire form of d, for --json: its data as "data" when
// it is JSON, else as "data_b64", as in docs/protocol.md.
func wireDelivery(d comb.Delivery) protocol.Delivery {
	w := protocol.Delivery{Partition: d.Partition, Offset: d.Offset, ID: d.ID, Lease: d.Lease, Attempt: d.Attempt, CreatedAt: d.CreatedAt}
	w.Data, w.DataB64 = wireData(d.Data)
	return w
}

// wireData is how --json shows message bytes: as "data" when they are JSON
// that encoding/json writes back unchanged (compact), so that the output
// holds them byte for byte, else as "data_b64".
func wireData(b []byte) (json.RawMessage, *string) {
	if len(b) > 0 && utf8.Valid(b) && json.Valid(b) && isCompactJSON(b) {
		return json.RawMessage(b), nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return nil, &s
}

func isCompactJSON(b []byte) bool {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return false
	}
	return bytes.Equal(buf.Bytes(), b)
}

// display shows message bytes to people: as they are when they are
// printable text, else quoted with Go's escapes.
func display(b []byte) string {
	if len(b) > 0 && utf8.Valid(b) && strings.IndexFunc(string(b), func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) < 0 {
		return string(b)
	}
	return strconv.Quote(string(b))
}

func num(n int64) string { return strconv.FormatInt(n, 10) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// nonNil makes an empty list print as [] rather than null.
func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}
