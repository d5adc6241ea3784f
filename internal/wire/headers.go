package wire

import (
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/internal/handjson"
	"github.com/combmq/comb/protocol"
)

// Headers, delays and the put headers that carry options. A push writes
// them per message ("headers", "delay_ms", "not_before"); a put as NATS
// headers. Both end in the same checks, so that the two verbs accept the
// same messages.

// Field names of a message's hold, as errors name them: a push's fields,
// a put's headers.
var (
	pushHoldFields = [2]string{"delay_ms", "not_before"}
	putHoldFields  = [2]string{protocol.HeaderDelayMS + " header", protocol.HeaderNotBefore + " header"}
)

// checkExtras checks a message's headers and hold and sets them on pm.
// Errors name the field bare ("headers: …", fields[0] for the delay,
// fields[1] for not-before); callers add where.
func checkExtras(pm *domain.PushMessage, h protocol.Headers, delayMS int64, notBefore string, now time.Time, fields [2]string) error {
	if h != nil {
		canon, err := CanonicalHeaders(h)
		if err != nil {
			return err
		}
		pm.Headers = canon
	}
	if delayMS != 0 && notBefore != "" {
		return badRequest("%s: given with %s; send at most one", fields[0], fields[1])
	}
	if err := checkRange(fields[0], delayMS, 0, protocol.MaxDelayMS); err != nil {
		return err
	}
	pm.DelayMS = delayMS
	if notBefore != "" {
		t, err := time.Parse(time.RFC3339Nano, notBefore)
		if err != nil {
			return badRequest("%s: %q is not an RFC 3339 time", fields[1], notBefore)
		}
		if t.After(now.Add(protocol.MaxDelayMS * time.Millisecond)) {
			return badRequest("%s: %s is more than %d ms ahead (the most a message may be held)", fields[1], notBefore, int64(protocol.MaxDelayMS))
		}
		pm.NotBefore = t
	}
	return nil
}

// CanonicalHeaders checks headers and returns them in their stored form,
// domain.Headers: {"Name":["v",…],…} with names in byte order. A name is 1
// to protocol.MaxHeaderNameBytes printable ASCII characters other than
// ':'; a value is UTF-8 without CR, LF or NUL, so that every header can
// travel as a NATS header too. Names starting with "Comb-" are Comb's own
// and refused (a put has taken its options out already). No headers at
// all return nil.
func CanonicalHeaders(h map[string]protocol.HeaderValues) (domain.Headers, error) {
	if len(h) == 0 {
		return nil, nil
	}
	if len(h) > protocol.MaxHeaders {
		return nil, protocol.Errorf(protocol.CodeTooLarge, "headers: %d names, at most %d", len(h), protocol.MaxHeaders)
	}
	names := make([]string, 0, len(h))
	for name, vs := range h {
		if err := checkHeaderName(name); err != nil {
			return nil, err
		}
		if hasPrefixFold(name, protocol.HeaderReservedPrefix) {
			return nil, badRequest("headers: %q: names starting with %q are reserved for Comb", name, protocol.HeaderReservedPrefix)
		}
		if len(vs) == 0 {
			return nil, badRequest("headers: %q has no value", name)
		}
		for _, v := range vs {
			if err := checkHeaderValue(name, v); err != nil {
				return nil, err
			}
		}
		names = append(names, name)
	}
	slices.Sort(names)
	b := make([]byte, 0, 64)
	b = append(b, '{')
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = handjson.AppendString(b, name)
		b = append(b, ":["...)
		for j, v := range h[name] {
			if j > 0 {
				b = append(b, ',')
			}
			b = handjson.AppendString(b, v)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

func checkHeaderName(name string) error {
	if name == "" || len(name) > protocol.MaxHeaderNameBytes {
		return badRequest("headers: name %q: must be 1 to %d bytes", truncate(name), protocol.MaxHeaderNameBytes)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c > '~' || c == ':' {
			return badRequest("headers: name %q: byte %d is not printable ASCII other than ':'", truncate(name), i)
		}
	}
	return nil
}

func checkHeaderValue(name, v string) error {
	if !utf8.ValidString(v) {
		return badRequest("headers: %q: value is not valid UTF-8", name)
	}
	if i := strings.IndexAny(v, "\r\n\x00"); i >= 0 {
		return badRequest("headers: %q: value holds a CR, LF or NUL at byte %d", name, i)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// putOptions are the headers a put reads as options, not message headers.
var putOptions = []string{protocol.HeaderPartition, protocol.HeaderID, protocol.HeaderDelayMS, protocol.HeaderNotBefore}

// splitPutHeaders takes a put's NATS headers apart: the option headers,
// matched without regard to case (people typing `nats req -H` do not mind
// it), and the rest, which the message keeps. An unknown "Comb-" header is
// a 400: it is a misspelt option far more often than a header meant for
// consumers.
func splitPutHeaders(h map[string][]string) (opts map[string]string, rest map[string]protocol.HeaderValues, err error) {
	opts = map[string]string{}
	for name, vs := range h {
		if !hasPrefixFold(name, protocol.HeaderReservedPrefix) {
			if rest == nil {
				rest = make(map[string]protocol.HeaderValues, len(h))
			}
			rest[name] = vs
			continue
		}
		known := false
		for _, o := range putOptions {
			if strings.EqualFold(name, o) {
				known = true
				if len(vs) > 0 && (opts[o] == "" || name == o) {
					opts[o] = vs[0]
				}
			}
		}
		if !known {
			return nil, nil, badRequest("header %s: unknown; a put's options are %s", name, strings.Join(putOptions, ", "))
		}
	}
	return opts, rest, nil
}

// putDelay reads the Comb-Delay-Ms header; checkExtras checks its range.
func putDelay(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, badRequest("%s: %q is not a whole number of milliseconds", putHoldFields[0], s)
	}
	return n, nil
}
