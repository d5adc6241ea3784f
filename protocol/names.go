package protocol

import "unicode/utf8"

// ValidateQueue checks a queue name: 1 to 16 dot-separated tokens of
// [A-Za-z0-9_-], at most 255 bytes in all. The token rule keeps every name
// a literal NATS subject suffix (no wildcards, no spaces), so that NATS
// permissions can scope namespaces of queues.
func ValidateQueue(name string) error {
	if name == "" {
		return BadRequest("queue name is empty")
	}
	if len(name) > MaxQueueBytes {
		return BadRequest("queue name is %d bytes, at most %d allowed", len(name), MaxQueueBytes)
	}
	tokens := 1
	start := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			if i == start {
				return BadRequest("queue name %q has an empty token", name)
			}
			tokens++
			start = i + 1
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return BadRequest("queue name %q has character %q at byte %d; tokens allow only A-Z a-z 0-9 _ -", name, rune(c), i)
		}
	}
	if start == len(name) {
		return BadRequest("queue name %q has an empty token", name)
	}
	if tokens > MaxQueueTokens {
		return BadRequest("queue name %q has %d tokens, at most %d allowed", name, tokens, MaxQueueTokens)
	}
	return nil
}

// ValidateName checks a partition or group name: 1 to MaxNameBytes bytes of
// printable UTF-8. field names the field in the error.
func ValidateName(field, name string) error {
	if name == "" {
		return BadRequest("%s: empty name", field)
	}
	return ValidateText(field, name, MaxNameBytes)
}

// ValidateText checks that s is at most max bytes of valid UTF-8 without
// control characters (C0, DEL, C1) or line and paragraph separators, which
// would break logs and line-oriented tools. Names and producer ids follow
// this rule; they are compared as bytes, so a name that is not valid UTF-8
// is refused rather than stored under a replacement character.
func ValidateText(field, s string, max int) error {
	if len(s) > max {
		return BadRequest("%s: %d bytes, at most %d allowed", field, len(s), max)
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return BadRequest("%s: control character %q at byte %d", field, rune(c), i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return BadRequest("%s: invalid UTF-8 at byte %d", field, i)
		}
		if (r >= 0x80 && r < 0xa0) || r == 0x2028 || r == 0x2029 {
			return BadRequest("%s: control character %U at byte %d", field, r, i)
		}
		i += size
	}
	return nil
}
