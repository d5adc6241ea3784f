package wire

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/combmq/comb/domain"
	"github.com/combmq/comb/protocol"
)

// fakeQueue answers info pages as the store does: names after each
// position, up to the limit, and whether more follow.
type fakeQueue struct {
	partitions []domain.PartitionInfo
	groups     []domain.GroupInfo
}

func pageOf[T any](all []T, at domain.PageAt, limit int, name func(*T) string) ([]T, bool) {
	if at.Done {
		return nil, false
	}
	i, _ := slices.BinarySearchFunc(all, at.After, func(v T, s string) int { return strings.Compare(name(&v), s) })
	if i < len(all) && name(&all[i]) == at.After {
		i++
	}
	end := min(i+limit, len(all))
	return all[i:end], end < len(all)
}

func (q fakeQueue) info(at domain.InfoParams) domain.Info {
	info := domain.Info{Name: "q", PartitionCount: int64(len(q.partitions)), GroupCount: int64(len(q.groups))}
	info.Partitions, info.MorePartitions = pageOf(q.partitions, at.Partitions, at.Limit, func(p *domain.PartitionInfo) string { return p.Name })
	info.Groups, info.MoreGroups = pageOf(q.groups, at.Groups, at.Limit, func(g *domain.GroupInfo) string { return g.Name })
	return info
}

// walkInfo pages through q as a client does, and returns every name seen
// and how many pages it took.
func walkInfo(t *testing.T, q fakeQueue, limit, maxBytes int) (partitions, groups []string, pages int) {
	t.Helper()
	after := ""
	for {
		body := fmt.Sprintf(`{"limit":%d,"after":%q}`, limit, after)
		at, err := DecodeInfo([]byte(body))
		require.NoError(t, err, body)
		data, kept := InfoReply(q.info(at), at, maxBytes)
		require.Positive(t, kept, "a page that lists nothing does not advance")
		if maxBytes > 0 {
			require.LessOrEqual(t, len(data), maxBytes)
		}
		var rep protocol.Info
		require.NoError(t, json.Unmarshal(data, &rep))
		require.Equal(t, int64(len(q.partitions)), rep.PartitionCount)
		require.LessOrEqual(t, len(rep.Partitions), limit)
		require.LessOrEqual(t, len(rep.Groups), limit)
		for _, p := range rep.Partitions {
			partitions = append(partitions, p.Name)
		}
		for _, g := range rep.Groups {
			groups = append(groups, g.Name)
		}
		pages++
		require.Less(t, pages, 10000, "the walk does not end")
		if rep.Next == "" {
			return partitions, groups, pages
		}
		after = rep.Next
	}
}

func TestInfoPages(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 200)
	var q fakeQueue
	for i := range 250 {
		q.partitions = append(q.partitions, domain.PartitionInfo{Name: fmt.Sprintf("%s-%04d", long, i), NextOffset: int64(i)})
	}
	for i := range 7 {
		q.groups = append(q.groups, domain.GroupInfo{Name: fmt.Sprintf("g%d", i)})
	}
	names := func() (ps, gs []string) {
		for _, p := range q.partitions {
			ps = append(ps, p.Name)
		}
		for _, g := range q.groups {
			gs = append(gs, g.Name)
		}
		return ps, gs
	}
	wantP, wantG := names()
	for _, c := range []struct{ limit, maxBytes, pages int }{
		{1000, 0, 1},        // one page holds everything
		{100, 0, 3},         // 100, 100, 50 partitions; the groups on the first
		{3, 0, 84},          // groups run out long before partitions
		{1000, 16 << 10, 0}, // the byte budget, not the limit, ends each page
	} {
		ps, gs, pages := walkInfo(t, q, c.limit, c.maxBytes)
		require.Equal(t, wantP, ps, "limit %d, %d bytes", c.limit, c.maxBytes)
		require.Equal(t, wantG, gs, "limit %d, %d bytes", c.limit, c.maxBytes)
		if c.pages > 0 {
			require.Equal(t, c.pages, pages, "limit %d", c.limit)
		} else {
			require.Greater(t, pages, 250*220/(16<<10), "pages of at most 16 KiB")
		}
	}

	// The first page of a small queue is the whole queue.
	small := fakeQueue{partitions: q.partitions[:2], groups: q.groups[:1]}
	data, _ := InfoReply(small.info(domain.InfoParams{Limit: protocol.DefaultInfoLimit}), domain.InfoParams{Limit: protocol.DefaultInfoLimit}, 0)
	var rep protocol.Info
	require.NoError(t, json.Unmarshal(data, &rep))
	require.Len(t, rep.Partitions, 2)
	require.Len(t, rep.Groups, 1)
	require.Empty(t, rep.Next)

	// A budget that fits no name keeps none, which the caller refuses.
	_, kept := InfoReply(q.info(domain.InfoParams{Limit: 10}), domain.InfoParams{Limit: 10}, 1000)
	require.Zero(t, kept)
}

func TestListPages(t *testing.T) {
	t.Parallel()
	var all []domain.QueueSummary
	for i := range 50 {
		all = append(all, domain.QueueSummary{Name: fmt.Sprintf("%s.q%03d", strings.Repeat("n", 200), i), Partitions: 1})
	}
	for _, c := range []struct{ limit, maxBytes int }{{1000, 0}, {7, 0}, {1000, 4 << 10}} {
		var seen []string
		after := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 1000)
			at, err := DecodeList(fmt.Appendf(nil, `{"limit":%d,"after":%q}`, c.limit, after))
			require.NoError(t, err)
			page, more := pageOf(all, domain.PageAt{After: at.After}, at.Limit, func(q *domain.QueueSummary) string { return q.Name })
			data, kept := ListReply(domain.QueueList{Queues: page, More: more}, c.maxBytes)
			require.Positive(t, kept)
			if c.maxBytes > 0 {
				require.LessOrEqual(t, len(data), c.maxBytes)
			}
			var rep protocol.ListReply
			require.NoError(t, json.Unmarshal(data, &rep))
			for _, q := range rep.Queues {
				seen = append(seen, q.Name)
			}
			if rep.Next == "" {
				break
			}
			after = rep.Next
		}
		require.Len(t, seen, len(all), "limit %d, %d bytes", c.limit, c.maxBytes)
		for i, q := range all {
			require.Equal(t, q.Name, seen[i])
		}
	}
}

func TestDecodePagesRefuses(t *testing.T) {
	t.Parallel()
	for body, msg := range map[string]string{
		`{"limit":0}`:                                   "limit: 0 is out of range 1..10000",
		`{"limit":10001}`:                               "limit: 10001 is out of range 1..10000",
		`{"after":"not a cursor!"}`:                     "after: not a cursor of an info reply",
		`{"after":"AA"}`:                                "after: not a cursor of an info reply", // one byte: no length
		`{"after":"` + cursorOf(4, "") + `"}`:           "after: not a cursor of an info reply", // unknown flag
		`{"after":"` + strings.Repeat("A", 2000) + `"}`: "after: not a cursor of an info reply",
		`{"limit":"10"}`:                                "limit",
		`{"offset":3}`:                                  "offset",
	} {
		_, err := DecodeInfo([]byte(body))
		require.ErrorContains(t, err, msg, body)
		pe, ok := protocol.AsError(err)
		require.True(t, ok, body)
		require.Equal(t, protocol.CodeBadRequest, pe.Code, body)
	}
	_, err := DecodeList([]byte(`{"after":"` + strings.Repeat("a", 256) + `"}`))
	require.ErrorContains(t, err, "after: not a cursor of a list reply")
	_, err = DecodeList([]byte(`{"limit":0}`))
	require.ErrorContains(t, err, "limit: 0 is out of range 1..10000")
	at, err := DecodeList(nil)
	require.NoError(t, err)
	require.Equal(t, domain.ListParams{Limit: protocol.DefaultListLimit}, at)
}

// cursorOf builds a raw info cursor: flags and the bytes after them.
func cursorOf(flags byte, rest string) string {
	return encodeRaw(append([]byte{flags, 0}, rest...))
}

// FuzzInfoCursor: every after decodes to a 400 or to positions that
// encode back to a cursor decoding to the same positions.
func FuzzInfoCursor(f *testing.F) {
	for _, at := range [][2]domain.PageAt{
		{{After: "eu"}, {After: "billing"}},
		{{Done: true}, {After: "g"}},
		{{After: strings.Repeat("p", 255)}, {Done: true}},
		{{}, {}},
	} {
		f.Add(encodeInfoCursor(at[0], at[1]))
	}
	f.Add("")
	f.Add("AA")
	f.Add(cursorOf(3, "x"))
	f.Fuzz(func(t *testing.T, s string) {
		p, g, err := DecodeInfoCursor(s)
		if err != nil {
			pe, ok := protocol.AsError(err)
			require.True(t, ok)
			require.Equal(t, protocol.CodeBadRequest, pe.Code)
			return
		}
		again := encodeInfoCursor(p, g)
		if p.Done && g.Done {
			require.Empty(t, again)
			return
		}
		p2, g2, err := DecodeInfoCursor(again)
		require.NoError(t, err)
		require.Equal(t, p, p2)
		require.Equal(t, g, g2)
	})
}

func encodeRaw(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
