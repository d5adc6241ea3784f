package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/embeddednats"
	"github.com/combmq/comb/internal/combtest"
	"github.com/combmq/comb/internal/testcerts"
	"github.com/combmq/comb/internal/testenv"
	"github.com/combmq/comb/protocol"
)

// opsEnv is how a test runs the commands for people: against one broker,
// with an XDG_CONFIG_HOME of its own, where the nats CLI's contexts live
// (none unless the test writes one).
type opsEnv struct {
	t      *testing.T
	broker *combtest.Env
	vars   map[string]string
	client *comb.Client
	ctx    context.Context
}

func newOpsEnv(t *testing.T, opts combtest.Options) *opsEnv {
	t.Helper()
	b := combtest.StartWith(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return &opsEnv{t: t, broker: b, ctx: ctx, client: comb.New(b.NC),
		vars: map[string]string{"NATS_URL": b.URL, "XDG_CONFIG_HOME": t.TempDir()}}
}

// result is one run of a command.
type result struct {
	code           int
	stdout, stderr string
}

// run runs `comb args…` with empty standard input.
func (e *opsEnv) run(args ...string) result { return e.runWith(Env{}, args...) }

// runWith runs `comb args…` with env's Stdin and Terminal.
func (e *opsEnv) runWith(env Env, args ...string) result {
	e.t.Helper()
	var o, errb bytes.Buffer
	env.Stdout, env.Stderr, env.Getenv = &o, &errb, envOf(e.vars)
	env.Exit = func(int) { e.t.Error("unexpected exit") }
	code := Run(e.ctx, env, args)
	return result{code, o.String(), errb.String()}
}

// ok runs a command that must succeed and returns its standard output.
func (e *opsEnv) ok(args ...string) string {
	e.t.Helper()
	r := e.run(args...)
	require.Equal(e.t, 0, r.code, "comb %s: %s", strings.Join(args, " "), r.stderr)
	return r.stdout
}

// okJSON runs a command with --json and decodes its one document into v.
func (e *opsEnv) okJSON(v any, args ...string) {
	e.t.Helper()
	out := e.ok(append(args, "--json")...)
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(e.t, dec.Decode(v), out)
	require.False(e.t, dec.More(), "one JSON document: %s", out)
}

func TestOpsCommands(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, combtest.Options{})

	// Nothing yet.
	var list protocol.ListReply
	e.okJSON(&list, "queues")
	require.Empty(t, list.Queues)
	require.NotNil(t, list.Queues, "an empty list is [], not null")
	r := e.run("queues")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stderr, "no queues yet")

	// push DATA, with a partition and an id, and push lines.
	require.Equal(t, "orders eu/0 (stored)\n", e.ok("push", "orders", `{"sku":42}`, "--partition", "eu", "--id", "o-1"))
	var pushed protocol.PushReply
	e.okJSON(&pushed, "push", "orders", "-p", "eu", `{"sku":43}`)
	require.Equal(t, []comb.PushResult{{Partition: "eu", Offset: 1, Status: comb.StatusStored}}, pushed.Results)
	r = e.runWith(Env{Stdin: strings.NewReader("one\ntwo\r\n\n\x00bin\n")}, "push", "orders", "-")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "orders: 3 messages pushed, 3 stored, 0 duplicates, offsets default/0-2\n", r.stdout)

	// queues and info agree with the client.
	want, err := e.client.List(e.ctx)
	require.NoError(t, err)
	e.okJSON(&list, "queues")
	require.Equal(t, want, list.Queues)
	require.Contains(t, e.ok("queues"), "QUEUE   PARTITIONS  MESSAGES  BYTES  GROUPS  PENDING\norders  2           5         ")
	var info comb.Info
	e.okJSON(&info, "info", "orders")
	wantInfo, err := e.client.Info(e.ctx, "orders")
	require.NoError(t, err)
	require.Equal(t, wantInfo.Config, info.Config)
	require.True(t, wantInfo.CreatedAt.Equal(info.CreatedAt))
	info.CreatedAt = wantInfo.CreatedAt
	require.Equal(t, wantInfo, info)
	out := e.ok("info", "orders")
	for _, s := range []string{"Queue orders", "5 messages", "PARTITION  NEXT OFFSET  LOW OFFSET\ndefault    3            0\neu         2            0",
		"No consumer group yet.", "lease_ms               30000"} {
		require.Contains(t, out, s)
	}
	// A page of one partition says what it leaves out.
	r = e.run("info", "orders", "--limit", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "PARTITION  NEXT OFFSET  LOW OFFSET\ndefault    3            0\n\n")
	require.Equal(t, "showing the first 1 of 2 partitions and 0 of 0 groups: --limit 0 shows them all\n", r.stderr)
	e.okJSON(&info, "info", "orders", "--limit", "0")
	require.Len(t, info.Partitions, 2)
	r = e.run("info", "orders", "--limit", "-1")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "--limit -1: want 0 (all) or 1 to 10000")

	// pop, then ack with what pop printed.
	var popped protocol.PopReply
	e.okJSON(&popped, "pop", "orders", "--group", "billing", "--partition", "eu", "--max", "2")
	require.Len(t, popped.Messages, 2)
	m := popped.Messages[1]
	require.Equal(t, `{"sku":43}`, string(m.Data))
	require.Equal(t, "o-1", popped.Messages[0].ID)
	require.NotEmpty(t, m.Lease)
	var ack protocol.AckResult
	e.okJSON(&ack, "ack", "orders", "eu", fmt.Sprint(m.Offset), m.Lease, "--group", "billing")
	require.True(t, ack.OK)
	r = e.run("ack", "orders", "eu", fmt.Sprint(m.Offset), m.Lease, "--group", "billing")
	require.Equal(t, 1, r.code, "a second ack under the ended lease is refused")
	require.Contains(t, r.stderr, "ack refused: lease expired or not held by this group; pop again")

	// A table pop of binary data, and the hint how to settle it.
	r = e.run("pop", "orders", "-g", "billing", "-n", "3")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "PARTITION  OFFSET  ATTEMPT  LEASE")
	require.Contains(t, r.stdout, `"\x00bin"`, "binary data is quoted")
	require.Contains(t, r.stderr, "settle with: comb ack orders default 2 l-")
	require.Contains(t, r.stderr, "--group billing")
	var auto protocol.PopReply
	e.okJSON(&auto, "pop", "orders", "-g", "other", "--auto-ack", "-n", "10", "-p", "default")
	require.Len(t, auto.Messages, 3)
	require.Empty(t, auto.Messages[0].Lease)
	require.Equal(t, "b25l", *auto.Messages[0].DataB64, "text that is not JSON goes as data_b64, as on the wire")
	r = e.run("pop", "orders", "-g", "other", "-p", "default")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stderr, "no message ready in orders for group other")

	// groups, from the groups verb: lag, dead letters and oldest age.
	var groups protocol.GroupsReply
	e.okJSON(&groups, "groups", "orders")
	require.Len(t, groups.Groups, 2)
	require.Equal(t, "billing", groups.Groups[0].Name)
	require.Equal(t, int64(3), groups.Groups[0].Pending)
	require.Equal(t, int64(1), groups.Groups[0].Leased)
	require.Positive(t, groups.Groups[0].OldestPendingAgeS)
	require.Equal(t, protocol.GroupState{Name: "other", Pending: 2, OldestPendingAgeS: groups.Groups[1].OldestPendingAgeS}, groups.Groups[1])
	require.Regexp(t, `GROUP +PENDING +LEASED +DEAD +OLDEST\nbilling +3 +1 +0 +[0-9.]+m?s\nother +2 +0 +0 +[0-9.]+m?s\n`, e.ok("groups", "orders"))
	// --delete wants --force off a terminal, refuses a bad name, and
	// deletes; a second delete is the broker's 404.
	r = e.run("groups", "orders", "--delete", "other")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "pass --force")
	r = e.run("groups", "orders", "--delete", "", "--force")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "--delete")
	require.Contains(t, e.ok("groups", "orders", "--delete", "other", "--force"), "deleted group other of queue orders")
	r = e.run("groups", "orders", "--delete", "other", "--force")
	require.NotZero(t, r.code)
	require.Contains(t, r.stderr, "queue orders has no group other")
	e.okJSON(&groups, "groups", "orders")
	require.Len(t, groups.Groups, 1)

	// configure, with numbers and durations.
	var cfg comb.Config
	e.okJSON(&cfg, "configure", "orders", "max_attempts=1", "lease_ms=2s", "dedup_window_s=1h", "dead_letter=true")
	got, err := e.client.Configure(e.ctx, "orders", comb.ConfigPatch{})
	require.NoError(t, err)
	require.Equal(t, got, cfg)
	require.EqualValues(t, 2000, cfg.LeaseMS)
	require.EqualValues(t, 3600, cfg.DedupWindowS)
	require.EqualValues(t, 1, cfg.MaxAttempts)
	require.Contains(t, e.ok("configure", "orders", "delay_ms=0"), "max_attempts           1\n")

	// dlq: fail a message with max_attempts 1, list, replay, purge.
	e.okJSON(&popped, "pop", "orders", "-g", "dlqs", "-p", "eu")
	m = popped.Messages[0]
	e.ok("ack", "orders", "eu", fmt.Sprint(m.Offset), m.Lease, "-g", "dlqs", "--status", "failed")
	var dl protocol.DLQReply
	e.okJSON(&dl, "dlq", "orders")
	wantDL, _, err := e.client.DeadLetters(e.ctx, "orders", comb.DeadLetterQuery{})
	require.NoError(t, err)
	require.Len(t, dl.DeadLetters, 1)
	require.Len(t, wantDL, 1)
	require.Equal(t, wantDL[0].DLQID, dl.DeadLetters[0].DLQID)
	require.Equal(t, "failed", dl.DeadLetters[0].Reason)
	require.Equal(t, `{"sku":42}`, string(dl.DeadLetters[0].Data))
	require.Contains(t, e.ok("dlq", "orders", "list", "--group", "dlqs"), wantDL[0].DLQID+"  dlqs   eu         0       1         failed")
	var done protocol.DoneReply
	e.okJSON(&done, "dlq", "orders", "replay", wantDL[0].DLQID)
	require.Equal(t, 1, done.Done)
	require.Equal(t, "purged 0 of 1 dead letters\n", e.ok("dlq", "orders", "purge", wantDL[0].DLQID))
	r = e.run("dlq", "orders")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.stderr, "no dead letters in orders")

	// seek back to the start: group other gets everything again.
	var moved protocol.SeekReply
	e.okJSON(&moved, "seek", "orders", "--group", "other", "--to", "start")
	require.Equal(t, 2, moved.Moved)
	require.Equal(t, "orders: moved 1 cursors of group other to end\n", e.ok("seek", "orders", "-g", "other", "--to", "end", "-p", "eu"))
	require.Contains(t, e.ok("seek", "orders", "-g", "other", "--to", "1h"), "moved 2 cursors of group other to 20")

	// delete --force.
	require.Equal(t, "deleted queue orders\n", e.ok("delete", "orders", "--force"))
	_, err = e.client.Info(e.ctx, "orders")
	require.ErrorIs(t, err, comb.ErrNotFound)
}

func TestOpsBadArguments(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, combtest.Options{})
	e.ok("push", "q", "x")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"info"}, "missing QUEUE"},
		{[]string{"info", "a", "b"}, `unexpected argument "b"`},
		{[]string{"info", "bad name"}, `queue name "bad name" has character ' '`},
		{[]string{"queues", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"queues", "--timeout", "soon"}, `invalid argument "soon" for "--timeout"`},
		{[]string{"queues", "--timeout", "0s"}, "--timeout 0s: want a positive duration"},
		{[]string{"queues", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"push", "q", "x", "--partition", "a\nb"}, "--partition: control character"},
		{[]string{"push", "q", "-", "--id", "x"}, "--id names one message"},
		{[]string{"pop", "q", "--max", "0"}, "--max 0: want 1 to 10000"},
		{[]string{"pop", "q", "--wait", "1000h"}, "--wait 1000h0m0s: want 0 to 5m0s"},
		{[]string{"pop", "q", "--lease", "1ms"}, "--lease 1ms: want 100ms"},
		{[]string{"pop", "q", "--from", "yesterday"}, `--from "yesterday": want all, new or an RFC 3339 time`},
		{[]string{"pop", "q", "--group", ""}, "--group: empty name"},
		{[]string{"tail", "q", "--max", "-1"}, "--max -1"},
		{[]string{"ack", "q", "default", "x", "l-1"}, `OFFSET "x": want a whole number`},
		{[]string{"ack", "q", "default", "0"}, "missing LEASE"},
		{[]string{"ack", "q", "default", "0", "l-1", "--status", "done"}, `--status "done": want completed, retry, failed, dead`},
		{[]string{"dlq", "q", "frob"}, `unknown dlq action "frob"`},
		{[]string{"dlq", "q", "replay"}, "replay wants the ids"},
		{[]string{"dlq", "q", "list", "d-1"}, "list takes no ids"},
		{[]string{"dlq", "q", "--limit", "0"}, "--limit 0"},
		{[]string{"configure", "q"}, "missing KEY=VALUE…"},
		{[]string{"configure", "q", "max_attemps=2"}, `unknown setting "max_attemps"; the settings are lease_ms, max_attempts,`},
		{[]string{"configure", "q", "max_attempts"}, `"max_attempts": want KEY=VALUE`},
		{[]string{"configure", "q", "lease_ms=abc"}, `lease_ms="abc": want a whole number of milliseconds or a duration such as 30s`},
		{[]string{"configure", "q", "max_attempts=1.5"}, `max_attempts="1.5": want a whole number`},
		{[]string{"configure", "q", "dead_letter=maybe"}, `dead_letter="maybe": want true or false`},
		{[]string{"configure", "q", "lease_ms=1", "lease_ms=2"}, "lease_ms is given twice"},
		{[]string{"configure", "q", "lease_ms=10"}, "lease_ms: 10 is out of range 100..86400000"}, // the broker's check
		{[]string{"seek", "q", "--to", "start"}, "--group is required"},
		{[]string{"seek", "q", "-g", "g"}, "--to is required"},
		{[]string{"seek", "q", "-g", "g", "--to", "soon"}, `--to "soon": want start, end, an RFC 3339 time`},
		{[]string{"delete", "q"}, "standard input is not a terminal to ask on; pass --force"},
	} {
		r := e.run(tc.args...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, "%v", tc.args)
		require.Empty(t, r.stdout, "%v", tc.args)
	}
	// The usage line comes with the mistakes of the command line.
	r := e.run("pop")
	require.Contains(t, r.stderr, "Usage: comb pop QUEUE [flags]\n`comb pop -h` lists the flags.")
	// Nothing was deleted or configured.
	info, err := e.client.Info(e.ctx, "q")
	require.NoError(t, err)
	require.EqualValues(t, protocol.DefaultLeaseMS, info.Config.LeaseMS)
}

func TestOpsHelp(t *testing.T) {
	t.Parallel()
	code, stdout, _ := run(t, "help")
	require.Equal(t, 0, code)
	for _, c := range []string{"queues", "info", "push", "pop", "tail", "ack", "groups", "dlq", "configure", "seek", "delete"} {
		require.Contains(t, stdout, "\n  "+c+" ", "comb help lists %s", c)
		code, out, _ := run(t, c, "-h")
		require.Equal(t, 0, code, c)
		require.Contains(t, out, "Usage: comb "+c)
		for _, f := range []string{"--json", "-s, --server string", "($NATS_URL)", "--user", "--password", "--token", "--creds", "--nkey",
			"--tls-ca", "--tls-cert", "--tls-key", "--context", "--timeout", "(default 5s)"} {
			require.Contains(t, out, f, "comb %s -h", c)
		}
		code, out2, _ := run(t, "help", c)
		require.Equal(t, 0, code)
		require.Equal(t, out, out2)
	}
	_, out, _ := run(t, "configure", "-h")
	require.Contains(t, out, "max_message_bytes")
}

func TestOpsErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, combtest.Options{
		NATS: embeddednats.Config{Options: natsConf(t, `
authorization {
  users: [
    {user: ops, password: s3cret}
    {user: reader, password: r34d, permissions: {publish: {deny: ["comb.pop.>"]}}}
  ]
}`)},
		ClientOptions: []nats.Option{nats.UserInfo("ops", "s3cret")},
	})
	e.vars["NATS_USER"], e.vars["NATS_PASSWORD"] = "ops", "s3cret"

	r := e.run("info", "orders")
	require.Equal(t, 1, r.code)
	require.Equal(t, "comb info: queue orders does not exist; `comb queues` lists them\n", r.stderr)

	r = e.run("queues", "--prefix", "elsewhere")
	require.Equal(t, 1, r.code)
	require.Equal(t, fmt.Sprintf("comb queues: no Comb broker answers on %s: is `comb serve` running? (--server)\n", e.broker.URL), r.stderr)

	r = e.run("queues", "--server", "nats://127.0.0.1:1")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "cannot reach a NATS server at nats://127.0.0.1:1")
	require.Contains(t, r.stderr, "is `comb serve` running? (--server, $NATS_URL, --context)")

	// A refused password is not printed, nor one in a URL.
	r = e.run("queues", "--password", "wr0ngpw")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "refused the credentials")
	require.Contains(t, strings.ToLower(r.stderr), "authorization violation")
	require.NotContains(t, r.stderr, "wr0ngpw")
	u := strings.Replace(e.broker.URL, "nats://", "nats://ops:wr0ngpw@", 1)
	r = e.run("queues", "--server", u)
	require.Equal(t, 1, r.code)
	require.NotContains(t, r.stderr, "wr0ngpw")
	require.Contains(t, r.stderr, "ops:xxxxx@")

	// A permission violation names the subject, without waiting for the
	// timeout.
	e.ok("push", "orders", "x")
	start := time.Now()
	r = e.run("pop", "orders", "--user", "reader", "--password", "r34d", "--timeout", "30s")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "the NATS server does not allow this user to publish to comb.pop.orders: permissions violation")
	require.Less(t, time.Since(start), 10*time.Second)
	e.ok("info", "orders", "--user", "reader", "--password", "r34d")
}

// natsConf parses conf, in nats-server's syntax, as `comb serve -config`.
func natsConf(t *testing.T, conf string) *server.Options {
	t.Helper()
	opts := &server.Options{}
	require.NoError(t, opts.ProcessConfigString(conf))
	return opts
}

func TestOpsTailStopsOnCancel(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, combtest.Options{})
	for _, mode := range []struct {
		queue string
		args  []string
	}{{"plain", nil}, {"json", []string{"--json"}}, {"peek", []string{"--no-ack"}}} {
		_, err := e.client.Push(e.ctx, mode.queue, []comb.Message{{Data: []byte(`{"n":1}`)}, {Partition: "eu", Data: []byte("two")}})
		require.NoError(t, err)
		var out, errb testenv.Buffer
		ctx, cancel := context.WithCancel(e.ctx)
		exited := make(chan int, 1)
		env := Env{Stdout: &out, Stderr: &errb, Getenv: envOf(e.vars), Exit: func(int) { t.Error("exit") }}
		go func() {
			exited <- Run(ctx, env, append([]string{"tail", mode.queue, "--group", "tailer"}, mode.args...))
		}()
		require.Eventually(t, func() bool { return strings.Count(out.String(), "\n") == 2 }, 10*time.Second, 10*time.Millisecond, errb.String())
		// A message pushed while tail waits arrives too.
		_, err = e.client.Push(e.ctx, mode.queue, []comb.Message{{Data: []byte(`{"n":3}`)}})
		require.NoError(t, err)
		want := 3
		if mode.queue == "peek" {
			// --no-ack holds the lease of partition default: the third
			// message waits for it. Another partition is free.
			_, err = e.client.Push(e.ctx, mode.queue, []comb.Message{{Partition: "us", Data: []byte("four")}})
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return strings.Count(out.String(), "\n") >= want }, 10*time.Second, 10*time.Millisecond, errb.String())
		cancel()
		select {
		case code := <-exited:
			require.Equal(t, 0, code, errb.String())
		case <-time.After(time.Second):
			t.Fatalf("%s: tail did not stop within a second of the cancel", mode.queue)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		require.Len(t, lines, 3, out.String())
		info, err := e.client.Info(e.ctx, mode.queue)
		require.NoError(t, err)
		require.Len(t, info.Groups, 1)
		switch mode.queue {
		case "json":
			var seen []string
			for _, l := range lines {
				var d protocol.Delivery
				dec := json.NewDecoder(strings.NewReader(l))
				dec.DisallowUnknownFields()
				require.NoError(t, dec.Decode(&d), l)
				require.NotEmpty(t, d.Lease)
				seen = append(seen, fmt.Sprintf("%s/%d", d.Partition, d.Offset))
			}
			require.ElementsMatch(t, []string{"default/0", "eu/0", "default/1"}, seen)
			require.Equal(t, comb.GroupInfo{Name: "tailer"}, info.Groups[0], "tail acked what it printed")
		case "plain":
			require.ElementsMatch(t, []string{`default/0 {"n":1}`, "eu/0 two", `default/1 {"n":3}`}, lines)
			require.Equal(t, comb.GroupInfo{Name: "tailer"}, info.Groups[0], "tail acked what it printed")
		case "peek":
			require.ElementsMatch(t, []string{`default/0 {"n":1}`, "eu/0 two", "us/0 four"}, lines)
			// Handed back when tail stopped: pending, and leased no more.
			require.Equal(t, comb.GroupInfo{Name: "tailer", Pending: 4}, info.Groups[0], errb.String())
			d, err := e.client.Pop(e.ctx, mode.queue, comb.PopOptions{Group: "tailer", Partition: "default", Max: 10})
			require.NoError(t, err)
			require.Len(t, d, 2, "at once, not after the lease")
			require.Equal(t, 1, d[0].Attempt, "a hand-back spends no attempt")
		}
	}
}

func TestOpsDeleteAsks(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, combtest.Options{})
	e.ok("push", "doomed", "x")
	tty := func() bool { return true }

	r := e.runWith(Env{Stdin: strings.NewReader("n\n"), Terminal: tty}, "delete", "doomed")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "delete queue doomed and all its messages? [y/N] ")
	require.Contains(t, r.stderr, "queue doomed not deleted")
	r = e.runWith(Env{Stdin: strings.NewReader(""), Terminal: tty}, "delete", "doomed")
	require.Equal(t, 1, r.code, "no answer is no")
	_, err := e.client.Info(e.ctx, "doomed")
	require.NoError(t, err)

	r = e.runWith(Env{Stdin: strings.NewReader("y\n"), Terminal: tty}, "delete", "doomed")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "deleted queue doomed\n", r.stdout)
	_, err = e.client.Info(e.ctx, "doomed")
	require.ErrorIs(t, err, comb.ErrNotFound)

	// Without a terminal it refuses, and asks nothing.
	e.ok("push", "doomed", "x")
	r = e.runWith(Env{Stdin: strings.NewReader("y\n")}, "delete", "doomed")
	require.Equal(t, 2, r.code)
	require.Equal(t, "comb delete: not deleting queue doomed: standard input is not a terminal to ask on; pass --force to delete without asking\n", r.stderr)
	_, err = e.client.Info(e.ctx, "doomed")
	require.NoError(t, err)
	// A queue that does not exist is said so before any question.
	r = e.runWith(Env{Stdin: strings.NewReader("y\n"), Terminal: tty}, "delete", "never")
	require.Equal(t, 1, r.code)
	require.NotContains(t, r.stderr, "[y/N]")
	require.Contains(t, r.stderr, "queue never does not exist")
	var ok protocol.OKReply
	e.okJSON(&ok, "delete", "doomed", "-f")
	require.True(t, ok.OK)
}

// TestOpsNATSContext: the nats CLI's contexts give the server and the
// credentials; flags and variables beat them.
func TestOpsNATSContext(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, combtest.Options{
		NATS:          embeddednats.Config{Options: natsConf(t, `authorization { users: [ {user: ops, password: s3cret} ] }`)},
		ClientOptions: []nats.Option{nats.UserInfo("ops", "s3cret")},
	})
	xdg := t.TempDir()
	writeContext := func(root, name, body string) {
		dir := filepath.Join(root, "nats", "context")
		require.NoError(t, os.MkdirAll(dir, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".json"), []byte(body), 0o600))
	}
	writeContext(xdg, "prod", fmt.Sprintf(`{"description":"the test's","url":%q,"user":"ops","password":"s3cret"}`, e.broker.URL))
	writeContext(xdg, "wrong", fmt.Sprintf(`{"url":%q,"user":"ops","password":"n0tit"}`, e.broker.URL))
	require.NoError(t, os.WriteFile(filepath.Join(xdg, "nats", "context.txt"), []byte("prod"), 0o600))
	e.ok("push", "orders", "x", "--server", e.broker.URL, "--user", "ops", "--password", "s3cret")

	// The selected context, with no variable or flag.
	e.vars = map[string]string{"XDG_CONFIG_HOME": xdg}
	var list protocol.ListReply
	e.okJSON(&list, "queues")
	require.Len(t, list.Queues, 1)
	require.Equal(t, "orders", list.Queues[0].Name)

	// --context and $NATS_CONTEXT name another; its password is not shown.
	r := e.run("queues", "--context", "wrong")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `refused the credentials (nats context "wrong")`)
	require.NotContains(t, r.stderr+r.stdout, "n0tit")
	e.vars["NATS_CONTEXT"] = "wrong"
	require.Equal(t, 1, e.run("queues").code)
	// A flag beats the context: the right password over the wrong one.
	e.ok("queues", "--password", "s3cret")
	e.ok("queues", "--context", "prod")
	delete(e.vars, "NATS_CONTEXT")

	// Flags beat the selected context: a server that is not there.
	r = e.run("queues", "-s", "nats://127.0.0.1:1")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `cannot reach a NATS server at nats://127.0.0.1:1 (nats context "prod")`)
	// An authentication flag replaces the context's whole authentication.
	r = e.run("queues", "--token", "t0ken")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "refused the credentials")

	// Another folder, and a context file's path, as in the nats CLI.
	xdg = t.TempDir()
	writeContext(xdg, "xdg", fmt.Sprintf(`{"url":%q,"user":"ops","password":"s3cret"}`, e.broker.URL))
	e.vars = map[string]string{"XDG_CONFIG_HOME": xdg}
	e.ok("info", "orders", "--context", "xdg")
	e.ok("info", "orders", "--context", filepath.Join(xdg, "nats", "context", "xdg.json"))
	r = e.run("info", "orders", "--context", "nope")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "nats context \"nope\"")
	require.Contains(t, r.stderr, "`nats context ls` lists them")
	// $NATS_URL and no context: the server, without credentials.
	e.vars = map[string]string{"XDG_CONFIG_HOME": t.TempDir(), "NATS_URL": e.broker.URL}
	r = e.run("info", "orders")
	require.Equal(t, 1, r.code, "no credentials")
	require.Contains(t, r.stderr, "refused the credentials")

	// A context the nats CLI itself saved and selected.
	// Last: NATSCLI skips the rest when the nats CLI is not installed.
	if natsCLI := testenv.NATSCLI(t); natsCLI != "" {
		xdg = t.TempDir()
		cmd := exec.Command(natsCLI, "context", "save", "fromcli", "--server", e.broker.URL, "--user", "ops", "--password", "s3cret", "--select")
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+xdg)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		e.vars = map[string]string{"XDG_CONFIG_HOME": xdg}
		e.okJSON(&list, "queues")
		require.Equal(t, "orders", list.Queues[0].Name)
	}
}

// TestOpsTLS: --tls-ca trusts a server's certificate.
func TestOpsTLS(t *testing.T) {
	t.Parallel()
	certs, err := testcerts.Write(t.TempDir())
	require.NoError(t, err)
	e := newOpsEnv(t, combtest.Options{
		NATS:          embeddednats.Config{Options: natsConf(t, fmt.Sprintf(`tls { cert_file: %q, key_file: %q }`, certs.Server, certs.ServerKey))},
		ClientOptions: []nats.Option{nats.RootCAs(certs.CA)},
	})
	r := e.run("queues")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "--tls-ca")
	e.ok("queues", "--tls-ca", certs.CA)
	e.vars["NATS_CA"] = certs.CA
	e.ok("push", "q", "over TLS")
}
