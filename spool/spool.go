// Package spool is a local write-ahead log of pushes accepted while
// PostgreSQL is unreachable, replayed into the store in order when it is
// back.
//
// The spool is a directory of files, each a sequence of framed records (a
// length, a CRC-32C, the push request). Append writes a batch of push
// requests and fsyncs once for all of them before it returns, so that a
// push answered "spooled" survives a crash of the process or the machine.
// Records are read back in append order by Next and forgotten by Commit
// once the store holds them; a file whose records are all committed is
// deleted. A file and a sequence number name each record: the drain
// commits the highest number it stored with the messages, in the same
// PostgreSQL transaction, so that a crash in the middle of a drain stores
// nothing twice (see store.PushSpooled).
//
// Open truncates a file at its first record that is cut short or fails its
// checksum: a crash mid-write leaves such a tail, and it was never
// acknowledged (the fsync had not returned).
//
// One process uses a directory at a time: Open takes an exclusive lock on
// it.
package spool

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nuid"

	"github.com/combmq/comb/domain"
)

// ErrFull is returned by Append for the requests past Options.MaxBytes.
var ErrFull = errors.New("spool full")

// ErrBroken is returned by Append after a write failed and the file could
// not be cut back to its last good record: nothing more is appended.
var ErrBroken = errors.New("spool: a failed write could not be undone")

// Options tune a Spool.
type Options struct {
	// MaxBytes bounds the bytes of the spool's files; an append past it is
	// refused with ErrFull. Must be positive.
	MaxBytes int64
	// FileBytes is the size past which appends go to a new file; 0 means
	// a quarter of MaxBytes, at most 64 MiB. Space comes back when a whole
	// file is drained.
	FileBytes int64
	Logger    *slog.Logger
}

// Stats are a spool's figures.
type Stats struct {
	// Bytes is the size of its files, drained parts of the oldest file
	// included until that file goes; MaxBytes is the bound.
	Bytes    int64
	MaxBytes int64
	// Records and Messages are what is not yet drained.
	Records  int64
	Messages int64
	// Oldest is the append time of the oldest record not yet drained;
	// zero when there is none.
	Oldest time.Time
	// Drained counts the messages committed by the drain since Open, and
	// DrainRate is their rate over the last ten seconds or so, per second.
	Drained   int64
	DrainRate float64
}

// partKey names a partition: a tenant's queue's partition.
type partKey struct {
	queue     domain.QueueRef
	partition string
}

// file is one spool file.
type file struct {
	num   int64
	id    string // unique among all spools: the drain's name for it
	path  string
	size  int64 // bytes of whole records
	last  int64 // seq of its last record; 0 when empty
	first time.Time
	// read and readSeq are the drain's position: the offset after the
	// last committed record, and its seq.
	read    int64
	readSeq int64
	w       *os.File // the file appended to; nil for the others
}

// Spool is an open spool directory. It is safe for concurrent use; Next
// and Commit are meant for one drainer at a time.
type Spool struct {
	dir  string
	id   string
	opts Options
	log  *slog.Logger
	lock *os.File

	mu       sync.Mutex
	files    []*file // oldest first; the last one is appended to
	bytes    int64
	records  int64
	messages int64
	pending  map[partKey]int64 // messages not yet drained, per partition
	// held mirrors records for Pending's fast path: with nothing spooled
	// (the normal case) a push checks it without the lock an append
	// holds through its fsync.
	held    atomic.Int64
	nextNum int64
	broken  bool
	oldest  time.Time // of the first record after the drain position
	drained int64
	rate    []rateSample
	notify  chan struct{}
	closed  bool
}

type rateSample struct {
	at      time.Time
	drained int64
}

// Open opens (creating it if need be) the spool in dir, truncates torn
// tails, and counts what is left to drain.
func Open(dir string, opts Options) (*Spool, error) {
	if opts.MaxBytes <= 0 {
		return nil, fmt.Errorf("spool: max bytes %d: must be positive", opts.MaxBytes)
	}
	if opts.FileBytes <= 0 {
		opts.FileBytes = min(opts.MaxBytes/4, 64<<20)
	}
	opts.FileBytes = max(opts.FileBytes, 1)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("spool: %s is in use by another process: %w", dir, err)
	}
	s := &Spool{dir: dir, opts: opts, log: opts.Logger, lock: lock, pending: map[partKey]int64{}, nextNum: 1,
		notify: make(chan struct{}, 1)}
	err = s.readID()
	if err == nil {
		err = s.load()
	}
	if err != nil {
		s.closeFiles()
		lock.Close()
		return nil, err
	}
	if len(s.files) > 0 {
		s.oldest = s.files[0].first
	}
	return s, nil
}

// readID reads the directory's id, or makes one for a new directory.
func (s *Spool) readID() error {
	path := filepath.Join(s.dir, "ID")
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		s.id = strings.TrimSpace(string(b))
		return nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("spool: %w", err)
	}
	s.id = nuid.Next()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s.id+"\n"), 0o600); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return syncDir(s.dir)
}

// ID returns the directory's id: the store keeps the drain's marks of the
// spool's files under it (store.ForgetSpoolFiles).
func (s *Spool) ID() string { return s.id }

// Dir returns the spool's directory.
func (s *Spool) Dir() string { return s.dir }

// fileName is the name of file num with id: the number orders the files.
func fileName(num int64, id string) string { return fmt.Sprintf("%016d-%s.spool", num, id) }

func parseName(name string) (int64, string, bool) {
	base, ok := strings.CutSuffix(name, ".spool")
	if !ok {
		return 0, "", false
	}
	n, id, ok := strings.Cut(base, "-")
	if !ok || id == "" {
		return 0, "", false
	}
	num, err := strconv.ParseInt(n, 10, 64)
	return num, id, err == nil && num > 0
}

// load reads every file, truncating each at its first bad record.
func (s *Spool) load() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	for _, e := range entries {
		num, id, ok := parseName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		s.files = append(s.files, &file{num: num, id: id, path: filepath.Join(s.dir, e.Name())})
		s.nextNum = max(s.nextNum, num+1)
	}
	slices.SortFunc(s.files, func(a, b *file) int { return int(a.num - b.num) })
	kept := s.files[:0]
	for _, f := range s.files {
		if err := s.scan(f); err != nil {
			return err
		}
		if f.last == 0 {
			if err := os.Remove(f.path); err != nil {
				return fmt.Errorf("spool: remove empty %s: %w", f.path, err)
			}
			continue
		}
		kept = append(kept, f)
	}
	s.files = kept
	return syncDir(s.dir)
}

// scan reads f's records, counts them, and truncates f after the last good
// one.
func (s *Spool) scan(f *file) error {
	h, err := os.OpenFile(f.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	defer h.Close()
	info, err := h.Stat()
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	var good int64
	var seqErr error
	err = readRecords(h, 0, info.Size(), func(r *Record, end int64) bool {
		if r.Seq != f.last+1 {
			seqErr = fmt.Errorf("%w: seq %d after %d", ErrCorrupt, r.Seq, f.last)
			return false
		}
		if f.last == 0 {
			f.first = r.Time
		}
		f.last = r.Seq
		good = end
		s.count(r, 1)
		return true
	})
	if err == nil {
		err = seqErr
	}
	if err != nil || good < info.Size() {
		s.log.Warn("spool: truncating a torn or corrupt tail", "file", f.path, "at", good, "size", info.Size(), "err", err)
		if err := h.Truncate(good); err != nil {
			return fmt.Errorf("spool: truncate %s: %w", f.path, err)
		}
		if err := h.Sync(); err != nil {
			return fmt.Errorf("spool: sync %s: %w", f.path, err)
		}
	}
	f.size = good
	s.bytes += good
	return nil
}

// readRecords calls fn with each record of h from offset from up to end,
// and the offset after it, until fn returns false. It returns the error
// that stopped it early: ErrShort, ErrCorrupt or a read error.
func readRecords(h *os.File, from, end int64, fn func(r *Record, end int64) bool) error {
	br := bufio.NewReaderSize(io.NewSectionReader(h, from, end-from), 256<<10)
	off := from
	var hdr [headerBytes]byte
	var buf []byte
	for off < end {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return ErrShort
			}
			return err
		}
		n, sum, err := frameLen(hdr[:])
		if err != nil {
			return err
		}
		if int64(n) > end-off-headerBytes {
			return ErrShort
		}
		buf = slices.Grow(buf[:0], n)[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return ErrShort
		}
		r, err := decodePayload(buf, sum)
		if err != nil {
			return err
		}
		off += headerBytes + int64(n)
		if !fn(&r, off) {
			return nil
		}
	}
	return nil
}

// count adds (sign 1) or takes away (-1) r from the figures.
func (s *Spool) count(r *Record, sign int64) {
	s.records += sign
	s.held.Store(s.records)
	s.messages += sign * int64(r.messages())
	for i := range r.Push.Messages {
		k := partKey{r.Push.Queue, r.Push.Messages[i].Partition}
		if n := s.pending[k] + sign; n > 0 {
			s.pending[k] = n
		} else {
			delete(s.pending, k)
		}
	}
}

// Files returns the ids of the spool's files, oldest first.
func (s *Spool) Files() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, len(s.files))
	for i, f := range s.files {
		ids[i] = f.id
	}
	return ids
}

// Pending reports whether any of p's partitions has spooled messages not
// yet drained: a push to it must be spooled too, after them, to keep its
// producer's order.
func (s *Spool) Pending(p *domain.PushParams) bool {
	if s.held.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return false
	}
	for i := range p.Messages {
		if s.pending[partKey{p.Queue, p.Messages[i].Partition}] > 0 {
			return true
		}
	}
	return false
}

// Empty reports whether nothing is left to drain.
func (s *Spool) Empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records == 0
}

// Appended returns a channel that receives (without blocking the spool)
// after appends, so that a drainer need not poll.
func (s *Spool) Appended() <-chan struct{} { return s.notify }

// Append writes reqs in order and fsyncs once for all of them. It returns
// how many it took, reqs[:n]: those are durable. When it took fewer than
// all, err says why: ErrFull (the rest would pass MaxBytes), or the write
// or fsync error (then n is 0: a failed write is cut back off the file).
func (s *Spool) Append(reqs []domain.PushParams) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errors.New("spool: closed")
	}
	if s.broken {
		return 0, ErrBroken
	}
	now := time.Now()
	var (
		buf   []byte
		took  int
		full  error
		recs  = make([]Record, 0, len(reqs))
		total = s.bytes
	)
	f, err := s.active()
	if err != nil {
		return 0, err
	}
	seq := f.last
	for i := range reqs {
		r := Record{Seq: seq + 1, Time: now, Push: reqs[i]}
		before := len(buf)
		buf = AppendRecord(buf, &r)
		n := int64(len(buf) - before)
		if n-headerBytes > MaxRecordBytes {
			buf = buf[:before]
			full = fmt.Errorf("spool: a push of %d bytes is larger than a record may be", n)
			break
		}
		if total+n > s.opts.MaxBytes {
			buf = buf[:before]
			full = ErrFull
			break
		}
		total += n
		seq++
		took++
		recs = append(recs, r)
	}
	if took == 0 {
		return 0, full
	}
	if _, err := f.w.Write(buf); err != nil {
		return 0, s.undo(f, err)
	}
	if err := f.w.Sync(); err != nil {
		return 0, s.undo(f, err)
	}
	if f.last == 0 {
		f.first = now
	}
	f.size += int64(len(buf))
	f.last = seq
	s.bytes += int64(len(buf))
	if s.records == 0 {
		s.oldest = now
	}
	for i := range recs {
		s.count(&recs[i], 1)
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return took, full
}

// undo cuts a failed write back off f.
func (s *Spool) undo(f *file, werr error) error {
	if err := f.w.Truncate(f.size); err != nil {
		s.broken = true
		s.log.Error("spool: cannot cut a failed write back", "file", f.path, "write_err", werr, "err", err)
		return fmt.Errorf("%w: %w", ErrBroken, werr)
	}
	if _, err := f.w.Seek(f.size, io.SeekStart); err != nil {
		s.broken = true
		return fmt.Errorf("%w: %w", ErrBroken, werr)
	}
	return fmt.Errorf("spool: append: %w", werr)
}

// active returns the file to append to, starting a new one when the last
// is past FileBytes or was opened for reading only.
func (s *Spool) active() (*file, error) {
	if n := len(s.files); n > 0 {
		f := s.files[n-1]
		if f.size < s.opts.FileBytes {
			if f.w == nil {
				w, err := os.OpenFile(f.path, os.O_WRONLY, 0)
				if err != nil {
					return nil, fmt.Errorf("spool: %w", err)
				}
				if _, err := w.Seek(f.size, io.SeekStart); err != nil {
					w.Close()
					return nil, fmt.Errorf("spool: %w", err)
				}
				f.w = w
			}
			return f, nil
		}
		if f.w != nil {
			if err := f.w.Close(); err != nil {
				return nil, fmt.Errorf("spool: close %s: %w", f.path, err)
			}
			f.w = nil
		}
	}
	id := nuid.Next()
	f := &file{num: s.nextNum, id: id, path: filepath.Join(s.dir, fileName(s.nextNum, id))}
	w, err := os.OpenFile(f.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	// The new name must survive a crash with the records in it.
	if err := syncDir(s.dir); err != nil {
		w.Close()
		os.Remove(f.path)
		return nil, err
	}
	s.nextNum++
	f.w = w
	s.files = append(s.files, f)
	return f, nil
}

// Batch is records of one file that the drain stores in one transaction.
type Batch struct {
	// File is the id of their file; Prev is the seq of the record before
	// the first one (0 for the file's first), Last the seq of the last.
	File    string
	Prev    int64
	Last    int64
	Records []Record
	end     int64     // offset after the last record
	next    time.Time // time of the record after them, if known
}

// Messages returns how many messages the batch holds.
func (b *Batch) Messages() int {
	n := 0
	for i := range b.Records {
		n += b.Records[i].messages()
	}
	return n
}

// Next returns the oldest records not yet committed, from one file, up to
// maxMessages messages and maxBytes bytes of frames (at least one record),
// or nil when there are none. Calling it again before Commit returns the
// same records.
func (s *Spool) Next(maxMessages int, maxBytes int64) (*Batch, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("spool: closed")
	}
	var f *file
	for _, g := range s.files {
		if g.readSeq < g.last {
			f = g
			break
		}
	}
	if f == nil {
		s.mu.Unlock()
		return nil, nil
	}
	path, from, end, prev := f.path, f.read, f.size, f.readSeq
	s.mu.Unlock()

	h, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	defer h.Close()
	b := &Batch{File: f.id, Prev: prev, Last: prev, end: from}
	msgs := 0
	err = readRecords(h, from, end, func(r *Record, off int64) bool {
		if len(b.Records) > 0 && (msgs+r.messages() > maxMessages || off-from > maxBytes) {
			b.next = r.Time
			return false
		}
		b.Records = append(b.Records, *r)
		b.Last, b.end = r.Seq, off
		msgs += r.messages()
		return true
	})
	if err != nil {
		// Open checked these bytes: a read that fails now is the disk's.
		return nil, fmt.Errorf("spool: read %s: %w", path, err)
	}
	return b, nil
}

// Commit forgets b's records: the store holds them. A file whose records
// are all committed is deleted, and the directory synced, before Commit
// returns; only then may the store forget the file's mark.
func (s *Spool) Commit(b *Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.files, func(f *file) bool { return f.id == b.File })
	if i < 0 || s.files[i].readSeq != b.Prev {
		return fmt.Errorf("spool: commit of %s %d..%d out of order", b.File, b.Prev, b.Last)
	}
	f := s.files[i]
	f.read, f.readSeq = b.end, b.Last
	for j := range b.Records {
		s.count(&b.Records[j], -1)
		s.drained += int64(b.Records[j].messages())
	}
	s.sampleRate(time.Now())
	switch {
	case !b.next.IsZero():
		s.oldest = b.next
	case f.readSeq < f.last:
		// Appended since Next read the file: the next record is no
		// older than the batch's last.
		s.oldest = b.Records[len(b.Records)-1].Time
	case i+1 < len(s.files):
		s.oldest = s.files[i+1].first
	default:
		s.oldest = time.Time{}
	}
	if f.readSeq < f.last {
		return nil
	}
	// Drained: the file goes, and with it the room it took.
	if f.w != nil {
		if err := f.w.Close(); err != nil {
			s.log.Warn("spool: close drained file", "file", f.path, "err", err)
		}
		f.w = nil
	}
	if err := os.Remove(f.path); err != nil {
		return fmt.Errorf("spool: remove drained %s: %w", f.path, err)
	}
	s.files = slices.Delete(s.files, i, i+1)
	s.bytes -= f.size
	return syncDir(s.dir)
}

// sampleRate keeps about ten seconds of drained totals for DrainRate.
func (s *Spool) sampleRate(now time.Time) {
	s.rate = append(s.rate, rateSample{now, s.drained})
	cut := 0
	for cut < len(s.rate)-1 && now.Sub(s.rate[cut+1].at) >= 10*time.Second {
		cut++
	}
	s.rate = s.rate[cut:]
	if len(s.rate) > 1024 {
		s.rate = slices.Delete(s.rate, 0, len(s.rate)-1024)
	}
}

// Stats returns the spool's figures.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Bytes: s.bytes, MaxBytes: s.opts.MaxBytes, Records: s.records, Messages: s.messages, Drained: s.drained}
	if s.records > 0 {
		st.Oldest = s.oldest
	}
	now := time.Now()
	if n := len(s.rate); n > 0 {
		first := s.rate[0]
		if now.Sub(s.rate[n-1].at) > 10*time.Second {
			return st // nothing drained lately
		}
		if d := now.Sub(first.at); n > 1 && d > 0 {
			st.DrainRate = float64(s.drained-first.drained) / max(d.Seconds(), 1)
		}
	}
	return st
}

// Close closes the files and releases the directory. It is safe twice.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.closeFiles()
	if cerr := s.lock.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *Spool) closeFiles() error {
	var errs []error
	for _, f := range s.files {
		if f.w != nil {
			errs = append(errs, f.w.Close())
			f.w = nil
		}
	}
	return errors.Join(errs...)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("spool: sync %s: %w", dir, err)
	}
	return nil
}
