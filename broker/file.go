package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/combmq/comb/bridge"
)

// FileBlock is the top-level key of the configuration file that holds
// Comb's own settings; everything else in the file is nats-server's.
const FileBlock = "comb"

// confToken is a value of nats-server's configuration parser in pedantic
// mode, which remembers where in which file it was written.
type confToken interface {
	Value() any
	Line() int
	Position() int
	SourceFile() string
}

// LoadFile reads a configuration file written in nats-server's own syntax
// into c: nats-server reads the file as its options, which become
// c.NATS.Options, and the top-level comb block sets Comb's settings, by
// their keys in Settings. It returns nats-server's warnings, for the log.
// Every error names the file and line.
func (c *Config) LoadFile(path string) (warnings []error, err error) {
	// nats-server's parser follows includes without a bound: a file that
	// includes itself, directly or not, overflows the stack.
	if err := checkIncludes(path, nil); err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	m, err := conf.ParseFileWithChecks(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	// nats-server reports the comb block as an unknown field; drop exactly
	// that error, in the words nats-server writes it (configErr.Source in
	// its errors.go), and keep every other.
	var combErr string
	block, hasBlock := m[FileBlock]
	if hasBlock {
		tok, ok := block.(confToken)
		if !ok {
			return nil, fmt.Errorf("config file %s: %s block: unexpected parser value %T", path, FileBlock, block)
		}
		combErr = fmt.Sprintf("%s:%d:%d: unknown field %q", tok.SourceFile(), tok.Line(), tok.Position(), FileBlock)
	}
	opts := &server.Options{}
	if perr := opts.ProcessConfigFile(path); perr != nil {
		var pe interface {
			Errors() []error
			Warnings() []error
		}
		if !errors.As(perr, &pe) {
			return nil, fmt.Errorf("config file: %w", perr)
		}
		var errs []error
		for _, e := range pe.Errors() {
			if hasBlock && e.Error() == combErr {
				continue
			}
			errs = append(errs, e)
		}
		warnings = pe.Warnings()
		if len(errs) > 0 {
			return warnings, fmt.Errorf("config file: %w", errors.Join(errs...))
		}
	}
	c.NATS.Options = opts
	if hasBlock {
		if err := c.loadBlock(block.(confToken)); err != nil {
			return warnings, fmt.Errorf("config file: %w", err)
		}
	}
	return warnings, nil
}

// loadBlock sets c's settings from the comb block, reporting every bad key
// and value at once.
func (c *Config) loadBlock(block confToken) error {
	where := func(t confToken) string { return fmt.Sprintf("%s:%d:%d", t.SourceFile(), t.Line(), t.Position()) }
	entries, ok := block.Value().(map[string]any)
	if !ok {
		return fmt.Errorf("%s: %s: want a block of settings, { key: value ... }", where(block), FileBlock)
	}
	keys := make([]string, 0, len(entries))
	for k := range entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []error
	for _, k := range keys {
		tok, ok := entries[k].(confToken)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s.%s: unexpected parser value %T", where(block), FileBlock, k, entries[k]))
			continue
		}
		if k == TenantLimitsKey {
			q, err := loadTenantLimits(tok, where)
			if err != nil {
				errs = append(errs, err)
			}
			c.Bridge.Quotas = q
			continue
		}
		s, ok := Lookup(k)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s: unknown setting %q (docs/configuration.md lists them)", where(tok), FileBlock, k))
			continue
		}
		var err error
		if l, ok := s.Value(c).(interface{ SetList([]string) error }); ok && isList(tok.Value()) {
			var elems []string
			if elems, err = confList(tok.Value().([]any)); err == nil {
				err = l.SetList(elems)
			}
		} else {
			var text string
			if text, err = confText(s.kind, tok.Value()); err == nil {
				err = s.Value(c).Set(text)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s.%s: %w", where(tok), FileBlock, k, err))
		}
	}
	return errors.Join(errs...)
}

// TenantLimitsKey is the comb block's tenants' quotas, a block of its own
// and only in the file: tenant_limits { default { … } ACCOUNT { … } }.
const TenantLimitsKey = "tenant_limits"

// quotaKeys are the keys of one tenant's quota, each with where it goes.
var quotaKeys = map[string]func(q *bridge.Quota, v float64){
	"max_queues":          func(q *bridge.Quota, v float64) { q.MaxQueues = int64(v) },
	"max_bytes":           func(q *bridge.Quota, v float64) { q.MaxBytes = int64(v) },
	"max_push_rate":       func(q *bridge.Quota, v float64) { q.PushRate = v },
	"max_push_bytes_rate": func(q *bridge.Quota, v float64) { q.PushBytesRate = v },
	"max_waiting_pops":    func(q *bridge.Quota, v float64) { q.MaxWaitingPops = int64(v) },
}

// loadTenantLimits reads the tenant_limits block: "default" for every
// tenant, and blocks named by account for those that differ ($G is the
// global account of a configuration without accounts).
func loadTenantLimits(block confToken, where func(confToken) string) (bridge.Quotas, error) {
	var out bridge.Quotas
	tenants, ok := block.Value().(map[string]any)
	if !ok {
		return out, fmt.Errorf("%s: %s.%s: want a block { default { … } ACCOUNT { … } }", where(block), FileBlock, TenantLimitsKey)
	}
	var errs []error
	for name, v := range tenants {
		tok, ok := v.(confToken)
		if !ok {
			return out, fmt.Errorf("%s: %s.%s.%s: unexpected parser value %T", where(block), FileBlock, TenantLimitsKey, name, v)
		}
		fields, ok := tok.Value().(map[string]any)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s.%s.%s: want a block of limits", where(tok), FileBlock, TenantLimitsKey, name))
			continue
		}
		var q bridge.Quota
		for key, fv := range fields {
			ftok, ok := fv.(confToken)
			set, known := quotaKeys[key]
			if !ok || !known {
				errs = append(errs, fmt.Errorf("%s: %s.%s.%s: unknown limit %q (max_queues, max_bytes, max_push_rate, max_push_bytes_rate, max_waiting_pops)",
					where(tok), FileBlock, TenantLimitsKey, name, key))
				continue
			}
			var num float64
			switch x := ftok.Value().(type) {
			case int64:
				num = float64(x)
			case float64:
				num = x
			default:
				errs = append(errs, fmt.Errorf("%s: %s.%s.%s.%s: %v is not a number", where(ftok), FileBlock, TenantLimitsKey, name, key, x))
				continue
			}
			if num < 0 {
				errs = append(errs, fmt.Errorf("%s: %s.%s.%s.%s: %v: must be 0 (no limit) or more", where(ftok), FileBlock, TenantLimitsKey, name, key, num))
				continue
			}
			set(&q, num)
		}
		switch name {
		case "default":
			out.Default = q
		case "$G":
			name = ""
			fallthrough
		default:
			if out.Tenants == nil {
				out.Tenants = map[string]bridge.Quota{}
			}
			out.Tenants[name] = q
		}
	}
	return out, errors.Join(errs...)
}

// confText turns a parsed value into the text its setting's Set reads. The
// parser has already turned sizes such as 64MB into numbers.
func confText(k kind, v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		if k != kindBool {
			return "", fmt.Errorf("%v is a boolean; want %s", v, k)
		}
		return strconv.FormatBool(v), nil
	case int64:
		switch k {
		case kindInt, kindSize:
			return strconv.FormatInt(v, 10), nil
		}
		return "", fmt.Errorf("%d is a number; want %s", v, k)
	case []any:
		if k != kindList {
			return "", fmt.Errorf("a list; want %s", k)
		}
		parts, err := confList(v)
		if err != nil {
			return "", err
		}
		for _, p := range parts {
			if strings.Contains(p, ",") {
				return "", fmt.Errorf("list element %q: want a string without commas", p)
			}
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("%v (%T): want %s", v, v, k)
}

func isList(v any) bool { _, ok := v.([]any); return ok }

// confList returns a parsed list's strings.
func confList(v []any) ([]string, error) {
	parts := make([]string, 0, len(v))
	for _, e := range v {
		if t, ok := e.(confToken); ok {
			e = t.Value()
		}
		str, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("list element %v: want a string", e)
		}
		parts = append(parts, str)
	}
	return parts, nil
}

func (k kind) String() string {
	switch k {
	case kindInt:
		return "a whole number"
	case kindSize:
		return "a size such as 65536 or 8MB"
	case kindBool:
		return "true or false"
	case kindDuration:
		return `a duration string such as "1s"`
	case kindList:
		return "a list of strings"
	}
	return "a string"
}

// includeLine matches an include directive as nats-server's lexer reads
// it: `include` then a path, quoted or not, relative to the including
// file's directory.
var includeLine = regexp.MustCompile(`(?m)^[ \t]*include[ \t]+(?:"([^"]*)"|'([^']*)'|([^\s;,]+))`)

// maxIncludeDepth bounds a chain of includes; real files nest one or two.
const maxIncludeDepth = 10

// checkIncludes reports an include cycle, or a chain deeper than
// maxIncludeDepth, starting at path; chain holds the files that include
// it. A file it cannot read is left to the parser, which says why.
func checkIncludes(path string, chain []string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil
	}
	for _, f := range chain {
		if f == abs {
			return fmt.Errorf("%s: includes itself (%s)", chain[0], strings.Join(append(chain, abs), " -> "))
		}
	}
	chain = append(chain, abs)
	if len(chain) > maxIncludeDepth {
		return fmt.Errorf("%s: includes nested more than %d deep", chain[0], maxIncludeDepth)
	}
	body, err := os.ReadFile(abs)
	if err != nil {
		return nil
	}
	for _, m := range includeLine.FindAllStringSubmatch(string(body), -1) {
		inc := m[1] + m[2] + m[3]
		if !filepath.IsAbs(inc) {
			inc = filepath.Join(filepath.Dir(abs), inc)
		}
		if err := checkIncludes(inc, chain); err != nil {
			return err
		}
	}
	return nil
}
