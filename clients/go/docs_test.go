package comb_test

import (
	"bufio"
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

	"github.com/stretchr/testify/require"
)

// docPath is the protocol page whose nats CLI examples TestProtocolDocExamples
// runs.
const docPath = "../../docs/protocol.md"

// docCommand is one "$ nats …" line of the page and the reply it shows.
type docCommand struct {
	line   int
	cmd    string
	expect []string
}

// TestProtocolDocExamples runs every "$ nats …" command of docs/protocol.md,
// in order, with the real nats CLI against a fresh Comb, and checks each
// JSON reply against the one the page shows. Values that differ from run to
// run (leases, dead-letter ids, times, cursors) only need to be present;
// when a later command quotes one, the value this run produced is put in
// its place. Replies that are not JSON (the micro tables) are only checked
// to mention the service.
func TestProtocolDocExamples(t *testing.T) {
	t.Parallel()
	natsBin, err := exec.LookPath("nats")
	if err != nil {
		t.Skip("the nats CLI is not installed: go install github.com/nats-io/natscli/nats@v0.5.0")
	}
	cmds := parseDoc(t, docPath)
	require.NotEmpty(t, cmds)
	// COMB_DOC_NATS_URL runs the page against a broker of your own, such as
	// `comb serve`; it must hold no queues, as the page starts from none.
	url := os.Getenv("COMB_DOC_NATS_URL")
	if url == "" {
		url = setup(t).env.URL
	}
	ctx, cancelAll := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelAll()

	// A home of its own, so no saved CLI context points elsewhere.
	home := t.TempDir()
	env := append(os.Environ(), "NATS_URL="+url, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "NATS_CONTEXT=")
	seen := map[string]string{} // value on the page -> value of this run
	for _, c := range cmds {
		line := c.cmd
		for page, run := range seen {
			line = strings.ReplaceAll(line, `"`+page+`"`, `"`+run+`"`)
		}
		args, err := splitShell(line)
		require.NoError(t, err, "docs/protocol.md:%d", c.line)
		require.Equal(t, "nats", args[0])

		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		cmd := exec.CommandContext(ctx, natsBin, args[1:]...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		runErr := cmd.Run()
		cancel()
		out := strings.TrimSpace(stdout.String())
		where := fmt.Sprintf("docs/protocol.md:%d: %s\nstdout: %s\nstderr: %s", c.line, line, out, stderr.String())

		want := strings.TrimSpace(strings.Join(c.expect, "\n"))
		if !strings.HasPrefix(want, "{") {
			require.NoError(t, runErr, where)
			if want != "" {
				require.Contains(t, out, "comb", where)
			}
			continue
		}
		var wantV, gotV any
		require.NoError(t, json.Unmarshal([]byte(want), &wantV), "the page's reply is not JSON: %s", where)
		require.NoError(t, json.Unmarshal([]byte(out), &gotV), "the reply is not JSON: %s", where)
		matchJSON(t, where, "", wantV, gotV, seen)
	}
}

// volatile names the fields whose values change from run to run.
var volatile = map[string]bool{
	"lease": true, "dlq_id": true, "next": true,
	"created_at": true, "dead_at": true, "expires_at": true,
}

// volatileAge names the numeric fields that change from run to run: the
// page's 0 must be 0, any other value only positive.
var volatileAge = map[string]bool{"oldest_pending_age_s": true}

// matchJSON compares a reply with the page's, recording volatile values.
func matchJSON(t *testing.T, where, path string, want, got any, seen map[string]string) {
	t.Helper()
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		require.True(t, ok, "%s\n%s: want an object, got %v", where, path, got)
		require.ElementsMatch(t, keys(w), keys(g), "%s\n%s: fields", where, path)
		for k, wv := range w {
			if volatileAge[k] {
				wn, _ := wv.(float64)
				gn, ok := g[k].(float64)
				require.True(t, ok, "%s\n%s.%s: want a number, got %v", where, path, k, g[k])
				if wn == 0 {
					require.Zero(t, gn, "%s\n%s.%s", where, path, k)
				} else {
					require.Positive(t, gn, "%s\n%s.%s", where, path, k)
				}
				continue
			}
			// Only string values vary: a peek's numeric next is compared.
			if ws, isString := wv.(string); volatile[k] && isString {
				gs, _ := g[k].(string)
				if ws == "" {
					require.Empty(t, gs, "%s\n%s.%s", where, path, k)
					continue
				}
				require.NotEmpty(t, gs, "%s\n%s.%s", where, path, k)
				if strings.HasSuffix(k, "_at") {
					_, err := time.Parse(time.RFC3339Nano, gs)
					require.NoError(t, err, "%s\n%s.%s", where, path, k)
				}
				if prev, ok := seen[ws]; ok && !strings.HasSuffix(k, "_at") {
					require.Equal(t, prev, gs, "%s\n%s.%s: the page uses one value where this run had two", where, path, k)
				}
				seen[ws] = gs
				continue
			}
			matchJSON(t, where, path+"."+k, wv, g[k], seen)
		}
	case []any:
		g, ok := got.([]any)
		require.True(t, ok, "%s\n%s: want an array, got %v", where, path, got)
		require.Len(t, g, len(w), "%s\n%s", where, path)
		for i := range w {
			matchJSON(t, where, fmt.Sprintf("%s[%d]", path, i), w[i], g[i], seen)
		}
	default:
		require.Equal(t, want, got, "%s\n%s", where, path)
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// parseDoc returns the "$ nats" commands of the page's fenced blocks, each
// with the lines after it up to the next command or the end of the block.
func parseDoc(t *testing.T, path string) []docCommand {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var (
		out     []docCommand
		inFence bool
		cur     *docCommand
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		if strings.HasPrefix(text, "```") {
			inFence = !inFence
			if cur != nil {
				out = append(out, *cur)
				cur = nil
			}
			continue
		}
		if !inFence {
			continue
		}
		if cmd, ok := strings.CutPrefix(text, "$ "); ok {
			if cur != nil {
				out = append(out, *cur)
			}
			cur = nil
			if strings.HasPrefix(cmd, "nats ") {
				cur = &docCommand{line: n, cmd: cmd}
			}
			continue
		}
		if cur != nil {
			cur.expect = append(cur.expect, text)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// splitShell splits a command line as a POSIX shell would for the forms the
// page uses: bare words, 'single quotes' and "double quotes" with \ escapes.
func splitShell(s string) ([]string, error) {
	var (
		args  []string
		cur   strings.Builder
		inArg bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inArg = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unclosed \" in %q", s)
			}
			inArg = true
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args, nil
}
