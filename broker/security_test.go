package broker

import (
	"context"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/internal/testcerts"
	"github.com/combmq/comb/internal/testenv"
)

const securityDoc = "../docs/security.md"

// request sends body on subject over c, which must answer, and decodes
// the reply.
func request(t *testing.T, c *testenv.Watched, subject, body string) map[string]any {
	t.Helper()
	m, err := c.Request(subject, []byte(body), 10*time.Second)
	require.NoError(t, err, subject)
	var rep map[string]any
	require.NoError(t, json.Unmarshal(m.Data, &rep), string(m.Data))
	return rep
}

// startConf starts a broker on the configuration text conf.
func startConf(t *testing.T, conf string) *Broker {
	t.Helper()
	path := filepath.Join(t.TempDir(), "comb.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	c := testConfig(t)
	_, err := c.LoadFile(path)
	require.NoError(t, err)
	return start(t, c)
}

const rogueConf = `
authorization {
  users: [
    {user: app, password: app-secret}
    {user: rogue, password: rogue-secret, permissions: {publish: ">", subscribe: ">"}}
    {user: auditor, password: auditor-secret}
  ]
}
comb { trusted_users: [auditor] }
`

// TestRogueResponder: a client allowed everything by the file tries to
// serve comb.push.> in Comb's queue group and outside it, and to eavesdrop
// on Comb's subjects and touch its wake-ups: each is a permission
// violation, and meanwhile 100 pushes are all stored and all popped back.
func TestRogueResponder(t *testing.T) {
	t.Parallel()
	b := startConf(t, rogueConf)
	url := b.ClientURL()
	rogue := testenv.MustDial(t, url, nats.UserInfo("rogue", "rogue-secret"))
	app := testenv.MustDial(t, url, nats.UserInfo("app", "app-secret"))

	answered := make(chan struct{}, 1000)
	fake := func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"results":[{"partition":"default","offset":0,"status":"stored"}]}`))
		answered <- struct{}{}
	}
	_, err := rogue.QueueSubscribe("comb.push.>", "comb", fake)
	require.NoError(t, err)
	rogue.Violation(t, "rogue joins the queue group")
	_, err = rogue.Subscribe("comb.push.>", fake)
	require.NoError(t, err)
	rogue.Violation(t, "rogue subscribes")

	// The rogue keeps trying while the pushes run.
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			_, _ = rogue.QueueSubscribe("comb.push.orders", "comb", fake)
			_ = rogue.Flush()
		}
	})
	for i := range 100 {
		rep := request(t, app, "comb.push.orders", fmt.Sprintf(`{"messages":[{"id":"m%d","data":%d}]}`, i, i))
		require.Equal(t, "stored", rep["results"].([]any)[0].(map[string]any)["status"], "push %d", i)
	}
	cancel()
	wg.Wait()
	require.Empty(t, answered, "the rogue answered a push")

	got := map[float64]bool{}
	for len(got) < 100 {
		rep := request(t, app, "comb.pop.orders", `{"max":100,"auto_ack":true}`)
		msgs := rep["messages"].([]any)
		require.NotEmpty(t, msgs, "popped %d of 100", len(got))
		for _, m := range msgs {
			got[m.(map[string]any)["data"].(float64)] = true
		}
	}
	require.Len(t, got, 100, "0 acknowledged pushes lost")

	// The eavesdropper.
	for _, subj := range []string{"comb.>", "_COMB.>"} {
		_, err := rogue.Subscribe(subj, func(*nats.Msg) {})
		require.NoError(t, err)
		rogue.Violation(t, "rogue subscribes "+subj)
	}
	require.NoError(t, rogue.Publish("_COMB.comb.wake.x", nil))
	rogue.Violation(t, "rogue publishes a wake-up")

	// A trusted user can.
	auditor := testenv.MustDial(t, url, nats.UserInfo("auditor", "auditor-secret"))
	seen := make(chan string, 1)
	_, err = auditor.Subscribe("comb.push.>", func(m *nats.Msg) { seen <- string(m.Data) })
	require.NoError(t, err)
	auditor.Allowed(t, "the trusted auditor subscribes comb.push.>")
	request(t, app, "comb.push.orders", `{"messages":[{"data":"seen"}]}`)
	select {
	case body := <-seen:
		require.Contains(t, body, "seen")
	case <-time.After(5 * time.Second):
		t.Fatal("the auditor saw no push")
	}
}

// TestPerVerbRecipes runs the recipes of docs/security.md through Go
// clients: a producer that pops is refused and leases nothing, the
// message stays for the consumer; a consumer cannot push; the operator
// reads figures and peeks but cannot pop, and only the operator peeks.
func TestPerVerbRecipes(t *testing.T) {
	t.Parallel()
	var conf string
	for _, ex := range securityExamples(t) {
		if strings.Contains(ex.conf, "user: producer") {
			conf = ex.conf
		}
	}
	require.NotEmpty(t, conf, "the recipes in %s", securityDoc)
	b := startConf(t, conf)
	url := b.ClientURL()
	producer := testenv.MustDial(t, url, nats.UserInfo("producer", "producer-secret"))
	consumer := testenv.MustDial(t, url, nats.UserInfo("consumer", "consumer-secret"))
	operator := testenv.MustDial(t, url, nats.UserInfo("operator", "operator-secret"))

	rep := request(t, producer, "comb.push.orders", `{"messages":[{"data":"one"}]}`)
	require.Equal(t, "stored", rep["results"].([]any)[0].(map[string]any)["status"])
	_, err := producer.Request("comb.pop.orders", []byte(`{"lease_ms":60000}`), time.Second)
	require.Error(t, err, "the producer's pop")
	producer.Violation(t, "the producer pops")
	_, err = producer.Request("comb.put.invoices", []byte("x"), time.Second)
	require.Error(t, err)
	producer.Violation(t, "the producer puts to another queue")

	_, err = consumer.Request("comb.push.orders", []byte(`{"messages":[{"data":"two"}]}`), time.Second)
	require.Error(t, err)
	consumer.Violation(t, "the consumer pushes")
	// Nothing was leased by the producer's pop, and the consumer's push
	// stored nothing: the consumer pops exactly the producer's message.
	rep = request(t, consumer, "comb.pop.orders", `{"max":10}`)
	msgs := rep["messages"].([]any)
	require.Len(t, msgs, 1)
	m := msgs[0].(map[string]any)
	require.Equal(t, "one", m["data"])
	require.EqualValues(t, 1, m["attempt"], "the first lease")
	ack := request(t, consumer, "comb.ack.orders", fmt.Sprintf(`{"acks":[{"partition":%q,"offset":%v,"lease":%q}]}`,
		m["partition"], m["offset"], m["lease"]))
	require.Equal(t, true, ack["results"].([]any)[0].(map[string]any)["ok"], "%v", ack)

	require.NotEmpty(t, request(t, operator, "comb.info.orders", ""))
	request(t, operator, "comb.list", "")
	_, err = operator.Request("comb.pop.orders", nil, time.Second)
	require.Error(t, err)
	operator.Violation(t, "the operator pops")
	// The operator peeks (the message is still there, acked by the
	// consumer but retained); the consumer may not.
	peek := request(t, operator, "comb.peek.orders", `{"limit":10}`)
	require.Len(t, peek["messages"].([]any), 1, "%v", peek)
	_, err = consumer.Request("comb.peek.orders", nil, time.Second)
	require.Error(t, err)
	consumer.Violation(t, "the consumer peeks")
}

// docExample is a conf block of docs/security.md and the nats commands
// after it, up to the next block.
type docExample struct {
	conf     string
	commands []string
}

func securityExamples(t *testing.T) []docExample {
	t.Helper()
	b, err := os.ReadFile(securityDoc)
	require.NoError(t, err)
	var out []docExample
	var block *[]string
	var lang string
	var buf []string
	for line := range strings.SplitSeq(string(b), "\n") {
		trim := strings.TrimSpace(line)
		if block == nil {
			if l, ok := strings.CutPrefix(trim, "```"); ok && l != "" {
				lang, buf, block = l, nil, &buf
			}
			continue
		}
		if trim != "```" {
			*block = append(*block, line)
			continue
		}
		switch lang {
		case "conf":
			out = append(out, docExample{conf: strings.Join(buf, "\n")})
		case "sh":
			if len(out) == 0 {
				// The PostgreSQL and Docker sections come first: their
				// commands need root or Docker, and the pgcluster, cli
				// and compose tests check what they show.
				break
			}
			for _, l := range buf {
				if l = strings.TrimSpace(l); strings.HasPrefix(l, "nats ") {
					out[len(out)-1].commands = append(out[len(out)-1].commands, l)
				}
			}
		}
		block = nil
	}
	require.GreaterOrEqual(t, len(out), 5)
	return out
}

// shellWords splits a command line the way the docs write them: words,
// and single-quoted strings.
var shellWords = regexp.MustCompile(`'[^']*'|\S+`)

// TestSecurityDocExamples starts a broker on every configuration of
// docs/security.md, with the certificates it names, and runs every nats
// command after it: a command marked "# refused" must be refused, every
// other must succeed.
func TestSecurityDocExamples(t *testing.T) {
	t.Parallel()
	cli := testenv.NATSCLI(t)
	for i, ex := range securityExamples(t) {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			certs := testcerts.New(t, dir)
			certs.Client(t, "alice", pkix.Name{CommonName: "alice"}, "alice@example.com")
			b := startConf(t, strings.ReplaceAll(ex.conf, "/etc/comb/", dir+"/"))
			for _, cmd := range ex.commands {
				line, comment, _ := strings.Cut(cmd, " # ")
				refused := strings.HasPrefix(comment, "refused")
				var args []string
				for _, w := range shellWords.FindAllString(strings.ReplaceAll(line, "/etc/comb/", dir+"/"), -1)[1:] {
					args = append(args, strings.Trim(w, "'"))
				}
				out, err := runCLI(t, cli, b.ClientURL(), args)
				if !refused {
					require.NoError(t, err, "%s: %s", cmd, out)
					continue
				}
				require.Regexp(t, `(?i)permissions violation|authorization violation|certificate signed by unknown authority`,
					out, "%s: %s", cmd, out)
			}
		})
	}
}

// runCLI runs the nats CLI against url with a private home, bounded in
// time: a refused subscription would otherwise wait for messages.
func runCLI(t *testing.T, cli, url string, args []string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, append([]string{"--server", url, "--timeout", "3s"}, args...)...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "NATS_CONTEXT=")
	if args[0] == "sub" {
		// A subscription runs until it is stopped: give it a moment to be
		// refused.
		cmd.WaitDelay = time.Second
		go func() {
			select {
			case <-time.After(2 * time.Second):
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
