package wire

import (
	"strings"
	"unicode/utf8"
)

// The verbs of the protocol: the second subject token.
const (
	VerbPush      = "push"
	VerbPut       = "put"
	VerbPop       = "pop"
	VerbAck       = "ack"
	VerbRenew     = "renew"
	VerbConfigure = "configure"
	VerbInfo      = "info"
	VerbList      = "list"
	VerbDelete    = "delete"
	VerbDLQ       = "dlq"
	VerbSeek      = "seek"
)

// Verbs lists every verb, in the order the bridge registers its endpoints.
var Verbs = []string{VerbPush, VerbPut, VerbPop, VerbAck, VerbRenew, VerbConfigure, VerbInfo, VerbList, VerbDelete, VerbDLQ, VerbSeek}

// Name limits.
const (
	// MaxQueueBytes is the longest queue name, in bytes.
	MaxQueueBytes = 255
	// MaxQueueTokens is the most dot-separated tokens in a queue name.
	MaxQueueTokens = 16
	// MaxNameBytes is the longest partition or group name, in bytes.
	MaxNameBytes = 255
	// MaxIDBytes is the longest producer id, in bytes. The protocol leaves
	// the id free; a bound keeps the dedup index small.
	MaxIDBytes = 255
	// MaxLeaseBytes is the longest lease string a request may carry. Leases
	// are opaque and short; anything longer cannot be one of ours.
	MaxLeaseBytes = 255
)

// ParseSubject splits a request subject "<prefix>.<verb>.<queue>" into its
// verb and queue, checking the queue name. The list verb takes no queue:
// "<prefix>.list" returns queue "".
func ParseSubject(prefix, subject string) (verb, queue string, err error) {
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok || !strings.HasPrefix(rest, ".") {
		return "", "", badRequest("subject %q: does not start with %q", subject, prefix+".")
	}
	rest = rest[1:]
	verb, queue, hasQueue := strings.Cut(rest, ".")
	switch verb {
	case VerbList:
		if hasQueue {
			return "", "", badRequest("subject %q: list takes no queue name", subject)
		}
		return verb, "", nil
	case VerbPush, VerbPut, VerbPop, VerbAck, VerbRenew, VerbConfigure, VerbInfo, VerbDelete, VerbDLQ, VerbSeek:
	default:
		return "", "", badRequest("subject %q: unknown verb %q", subject, verb)
	}
	if !hasQueue || queue == "" {
		return "", "", badRequest("subject %q: queue name missing", subject)
	}
	if err := ValidateQueue(queue); err != nil {
		return "", "", err
	}
	return verb, queue, nil
}

// ValidateQueue checks a queue name: 1 to 16 dot-separated tokens of
// [A-Za-z0-9_-], at most 255 bytes in all. The token rule keeps every name a
// literal NATS subject suffix (no wildcards, no spaces), so that NATS
// permissions can scope namespaces of queues.
func ValidateQueue(name string) error {
	if name == "" {
		return badRequest("queue name is empty")
	}
	if len(name) > MaxQueueBytes {
		return badRequest("queue name is %d bytes, at most %d allowed", len(name), MaxQueueBytes)
	}
	tokens := 1
	start := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			if i == start {
				return badRequest("queue name %q has an empty token", name)
			}
			tokens++
			start = i + 1
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return badRequest("queue name %q has character %q at byte %d; tokens allow only A-Z a-z 0-9 _ -", name, rune(c), i)
		}
	}
	if start == len(name) {
		return badRequest("queue name %q has an empty token", name)
	}
	if tokens > MaxQueueTokens {
		return badRequest("queue name %q has %d tokens, at most %d allowed", name, tokens, MaxQueueTokens)
	}
	return nil
}

// ValidateName checks a partition or group name: 1 to 255 bytes of UTF-8
// without control characters. field names the JSON field in the error.
func ValidateName(field, name string) error {
	if name == "" {
		return badRequest("%s: empty name", field)
	}
	return validateText(field, name, MaxNameBytes)
}

// validateText checks that s is at most max bytes of valid UTF-8 without
// control characters (C0, DEL, C1) or line and paragraph separators, which
// would break logs and line-oriented tools.
func validateText(field, s string, max int) error {
	if len(s) > max {
		return badRequest("%s: %d bytes, at most %d allowed", field, len(s), max)
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return badRequest("%s: control character %q at byte %d", field, rune(c), i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return badRequest("%s: invalid UTF-8 at byte %d", field, i)
		}
		if (r >= 0x80 && r < 0xa0) || r == 0x2028 || r == 0x2029 {
			return badRequest("%s: control character %U at byte %d", field, r, i)
		}
		i += size
	}
	return nil
}
