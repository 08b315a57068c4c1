package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// ProfileReport is the final check of one profile's healthy store.
type ProfileReport struct {
	Name        string
	Acked       int // rows acknowledged by its writers
	Required    int // stamped after its last restore finished: must be there once
	Lost        int // required rows missing
	Duplicated  int // extra copies of any row (same session, content, timestamp)
	RolledBack  int // stamped before a restore began and not there (allowed)
	Resurrected int // acknowledged after a restore's backup began and before the restore began, not in the backup, yet there by a replay: rolled back on purpose, then replayed back
	// NotRolledBack rows are like Resurrected but no replay wrote them:
	// the restore did not take (the store is not what was restored).
	NotRolledBack int
	// NotRolledBackBy counts NotRolledBack by the restore's fault kind.
	NotRolledBackBy map[string]int
	// LostEarlier rows were acknowledged before some restore's backup
	// began, yet are neither in that backup, nor a later one, nor the
	// store: lost before the restore could hide the loss.
	LostEarlier        int
	LostEarlierSamples []string
	// AckedAfterRolledBack rows were stamped before a restore began but
	// acknowledged after it began, and are not there (allowed, reported).
	AckedAfterRolledBack int
	// StraddleKept rows were stamped before a restore began, acknowledged
	// after it began (so perhaps committed into the orphan after the
	// replacement), are not in its backup, and are there: kept, neither
	// lost nor counted as replayed back.
	StraddleKept int
	// Unverifiable rows were acknowledged before a backup that was taken
	// while an incident of the store was unfinished (or agentd had just
	// started), are missing, and so cannot be told lost or rolled back.
	Unverifiable int
	// DuringTool rows were stamped while a restore tool (cp, rsync, tar,
	// sqlite3, the rename) was writing the store. Missing ones are the
	// incident's to salvage or count (issue 13): DuringMissing when an
	// incident of the store was opened around the tool, DuringLost when
	// none was (lost silently).
	DuringTool    int
	DuringMissing int
	// DuringRolledBack rows were stamped while `sqlite3 .restore` ran and
	// are missing, committed before SQLite's backup API took the store's
	// write lock (beforeBackupLock): the restore rolled them back, as any
	// row committed before a restore (not lost).
	DuringRolledBack  int
	DuringLost        int
	DuringLostSamples []string
	LastRestore       float64 // unix seconds; 0 without a restore
	Restores          int
	Integrity         string // "ok" or what integrity_check and the FTS5 checks said
	Damaged           string // how the rows of a store too corrupt to read whole were read; "" when it was not
	// DamagedBackups were too corrupt to read whole (taken from a corrupt
	// store), and read by id range like a damaged store.
	DamagedBackups      int
	DamagedBackupRanges int
	CountMismatch       int // sessions whose message_count differs from their rows
	Leftovers           []string
	LostSamples         []string // a few lost rows, for the report
	// ResurrectedBy counts the Resurrected rows by the divert that
	// replayed them ("kind: rule", replaySources).
	ResurrectedBy map[string]int
	// ResurrectedSamples names a few of them with the divert that
	// replayed them.
	ResurrectedSamples []string
	// OrphanReplayed rows looked replayed back, but only diverts of an
	// earlier replacement of the store replayed them: committed into that
	// replacement's orphan after it, never in the generation the later
	// restore rolled back (replaySources). Kept, as they must be.
	OrphanReplayed int
	resurrected    []replayedRow
}

// judge is what the final check knows of the run beyond the store, the
// backups and the acks.
type judge struct {
	// settled reports whether a backup taken at t must hold every row
	// acknowledged before it: agentd had been up long enough to have seen
	// any orphan, and no incident of the store was still on its way to
	// replaying its rows (a backup taken then legitimately misses them).
	settled func(t time.Time) bool
	// failed reports whether the row acknowledged at seen by a slot's
	// writer was written by a holder of an incident that failed: its
	// orphan was never captured, so a backup's lack of the row is a loss,
	// not a pending replay.
	failed func(s *writerSlot, seen time.Time) bool
	// noticed reports whether an incident of the store was opened around
	// restore rs (agentd saw the tool at work).
	noticed func(rs restore) bool
	// unknown is set when the run could not read agentd's incidents
	// (an interrupted run): settled and noticed then know nothing, and
	// a missing row they would have excused or blamed is unverifiable,
	// not lost. The run fails on the unread incidents themselves.
	unknown bool
	// opened is when the incident with this id opened, when the run
	// read it (replaySources); nil knows none.
	opened func(id string) (time.Time, bool)
}

// checker classifies one profile's acknowledged rows.
type checker struct {
	restores []restore
	// seqs is every acked row's stamp by session and seq, for the order
	// a session's writer committed them in (beforeBackupLock).
	seqs    map[string]map[int64]float64
	backups []*storeRows // restore i's backup, read on demand
	dir     string
	got     *storeRows
	watch   *ackWatch
	j       judge
	pr      *ProfileReport
}

// checkProfile compares the store with every ack of its writers.
func checkProfile(p *profile, slots []*writerSlot, watch *ackWatch, j judge, work string) (ProfileReport, error) {
	pr := ProfileReport{Name: p.name}
	dir := filepath.Join(work, p.name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return pr, err
	}
	cp, err := privateCopy(p.db, dir)
	if err != nil {
		return pr, fmt.Errorf("copy %s: %w", p.db, err)
	}
	pr.Integrity = integrity(cp)
	got, err := readRows(cp)
	if err != nil {
		// Count what can still be read: the store is corrupt (the run
		// fails on that), but its rows still say what was lost.
		var bad int
		got, bad, err = readRowsDamaged(cp)
		if err != nil {
			return pr, err
		}
		pr.Damaged = fmt.Sprintf("%d id ranges of %d unreadable", bad, damagedChunk)
		if pr.Integrity == "ok" {
			pr.Integrity = "messages unreadable as a whole"
		}
	}
	c := &checker{restores: p.allRestores(), dir: dir, got: got, watch: watch, j: j, pr: &pr, seqs: map[string]map[int64]float64{}}
	c.backups = make([]*storeRows, len(c.restores))
	pr.Restores = len(c.restores)
	if len(c.restores) > 0 {
		pr.LastRestore = unixSec(c.restores[len(c.restores)-1].At)
	}
	for _, n := range got.rows {
		if n > 1 {
			pr.Duplicated += n - 1
		}
	}
	for _, cnt := range got.sessions {
		if cnt[0] != cnt[1] {
			pr.CountMismatch++
		}
	}
	acksOf := map[*writerSlot][]hermestest.Ack{}
	for _, s := range slots {
		if s.p != p {
			continue
		}
		acks, err := hermestest.ReadAcks(s.opts.Ack)
		if err != nil {
			return pr, err
		}
		acksOf[s] = acks
		for _, a := range acks {
			if c.seqs[a.Session] == nil {
				c.seqs[a.Session] = map[int64]float64{}
			}
			c.seqs[a.Session][a.Seq] = a.Timestamp
		}
	}
	for _, s := range slots {
		for _, a := range acksOf[s] {
			if err := c.classify(s, a); err != nil {
				return pr, err
			}
		}
	}
	pr.Leftovers = leftovers(p)
	var orphan int
	pr.ResurrectedBy, orphan, pr.ResurrectedSamples = replaySources(p.dir, pr.resurrected, j.opened)
	pr.Resurrected -= orphan
	pr.OrphanReplayed = orphan
	return pr, nil
}

// classify puts one acknowledged row in its place. The restore that
// decides is the first one that finished at or after the row's stamp.
func (c *checker) classify(s *writerSlot, a hermestest.Ack) error {
	c.pr.Acked++
	k := rowKey{session: a.Session, content: hermestest.MessageContent(a.Session, a.Seq), ts: a.Timestamp}
	n, seen := c.got.rows[k], c.watch.seenAt(k)
	i := sort.Search(len(c.restores), func(i int) bool { return unixSec(c.restores[i].At) >= a.Timestamp })
	switch {
	case i == len(c.restores):
		c.pr.Required++
		if n == 0 {
			c.pr.Lost++
			sample(&c.pr.LostSamples, a)
		}
		return nil
	case a.Timestamp > unixSec(c.restores[i].Start):
		return c.during(i, s, a, k, n, seen)
	}
	return c.before(i, s, a, k, n, seen)
}

// before judges a row stamped before restore i began: the restore may
// roll it back, but a row acknowledged before the restore's backup began
// must be in that backup (or a later one), or the store.
func (c *checker) before(i int, s *writerSlot, a hermestest.Ack, k rowKey, n int, seen time.Time) error {
	rs := c.restores[i]
	if n == 0 {
		if !seen.IsZero() && seen.Before(rs.BackupAt) {
			out, err := c.missingSince(i, s, k, seen)
			if err != nil {
				return err
			}
			switch out {
			case outcomeLost:
				c.pr.LostEarlier++
				sample(&c.pr.LostEarlierSamples, a)
				return nil
			case outcomeUnverifiable:
				c.pr.Unverifiable++
				c.pr.RolledBack++
				return nil
			}
		}
		c.pr.RolledBack++
		if !seen.IsZero() && !seen.Before(rs.Start) {
			c.pr.AckedAfterRolledBack++
		}
		return nil
	}
	b, err := c.backup(i)
	if err != nil {
		return err
	}
	switch {
	case b.rows[k] > 0:
		// Kept by the backup.
	case !seen.IsZero() && seen.Before(rs.BackupAt):
		// Committed before the backup, which lacked it (an orphan's row
		// not replayed yet): put back by a later replay, as it should be.
	case !seen.IsZero() && seen.Before(rs.Start) && c.got.replayed[k] > 0:
		// Committed before the restore began and after its backup: the
		// restore rolled it back on purpose, and a replay brought it back.
		c.pr.Resurrected++
		c.pr.resurrected = append(c.pr.resurrected, replayedRow{key: k, start: rs.Start})
	case !seen.IsZero() && seen.Before(rs.Start):
		// The same, but no replay wrote it: the restore never rolled it
		// back (an in-place copy under a live WAL, whose frames still
		// overlay the restored main). The store is not the backup.
		c.pr.NotRolledBack++
		if c.pr.NotRolledBackBy == nil {
			c.pr.NotRolledBackBy = map[string]int{}
		}
		c.pr.NotRolledBackBy[rs.Kind]++
	default:
		// Acknowledged after the restore began: perhaps committed into
		// the orphan after the replacement, which a replay keeps.
		c.pr.StraddleKept++
	}
	return nil
}

// during judges a row stamped while restore i's tool wrote the store.
func (c *checker) during(i int, s *writerSlot, a hermestest.Ack, k rowKey, n int, seen time.Time) error {
	c.pr.DuringTool++
	if n > 0 {
		return nil
	}
	if i+1 < len(c.restores) {
		// A later restore rolls back what was committed after its
		// backup began; only a row acknowledged before then must
		// have survived the tool.
		next := c.restores[i+1]
		if seen.IsZero() || !seen.Before(next.BackupAt) {
			c.pr.RolledBack++
			return nil
		}
		out, err := c.missingSince(i+1, s, k, seen)
		if err != nil {
			return err
		}
		switch out {
		case outcomeFound:
			c.pr.RolledBack++
			return nil
		case outcomeUnverifiable:
			c.pr.Unverifiable++
			c.pr.RolledBack++
			return nil
		}
	}
	if c.restores[i].Kind == FaultSqlite3Restore && c.beforeBackupLock(i, a) {
		c.pr.DuringRolledBack++
		c.pr.RolledBack++
		return nil
	}
	if c.j.unknown {
		c.pr.Unverifiable++
		return nil
	}
	if c.j.noticed(c.restores[i]) {
		c.pr.DuringMissing++
		return nil
	}
	c.pr.DuringLost++
	sample(&c.pr.DuringLostSamples, a)
	return nil
}

// beforeBackupLock reports whether a, stamped while restore i's
// `sqlite3 .restore` ran and missing, is one the restore rolled back.
// SQLite's backup API writes the destination inside one write
// transaction, taken at its first step and held to the last: a row its
// writer committed before that is overwritten with the backup's pages,
// one committed after it is appended on top of the restored store. The
// harness cannot see when the lock was taken, but a session's writer
// commits its rows in seq order, so the restore cuts each session once:
// a missing row is rolled back only if no earlier row of its session
// stamped since the backup began, and not in the backup, survived (an
// earlier row committed after the lock would put a after it too). A row missing after a
// surviving one is lost, whatever the tool.
func (c *checker) beforeBackupLock(i int, a hermestest.Ack) bool {
	b, err := c.backup(i)
	if err != nil {
		return false // cannot tell: lost
	}
	from := unixSec(c.restores[i].BackupAt)
	for seq, ts := range c.seqs[a.Session] {
		if seq >= a.Seq || ts < from {
			continue
		}
		// A row stamped just after the backup began may be in it (its
		// read began a moment later): there because the restore put it
		// back, no sign of where the cut fell.
		k := rowKey{session: a.Session, content: hermestest.MessageContent(a.Session, seq), ts: ts}
		if c.got.rows[k] > 0 && c.got.replayed[k] == 0 && b.rows[k] == 0 {
			return false
		}
	}
	return true
}

type outcome int

const (
	outcomeFound        outcome = iota // in restore j's backup or a later one
	outcomeUnverifiable                // backup j taken mid-incident: cannot tell
	outcomeLost                        // in no backup from j on
)

// missingSince judges a row acknowledged before restore j's backup began
// that is not in the store.
func (c *checker) missingSince(j int, s *writerSlot, k rowKey, seen time.Time) (outcome, error) {
	if !c.j.settled(c.restores[j].BackupAt) && !c.j.failed(s, seen) {
		return outcomeUnverifiable, nil
	}
	for m := j; m < len(c.restores); m++ {
		b, err := c.backup(m)
		if err != nil {
			return 0, err
		}
		if b.rows[k] > 0 {
			return outcomeFound, nil
		}
	}
	return outcomeLost, nil
}

// backup reads restore i's backup (a private copy), once.
func (c *checker) backup(i int) (*storeRows, error) {
	if c.backups[i] != nil {
		return c.backups[i], nil
	}
	bdir := filepath.Join(c.dir, fmt.Sprintf("backup-%d", i))
	if err := os.MkdirAll(bdir, 0o700); err != nil {
		return nil, err
	}
	bcp, err := privateCopy(c.restores[i].Backup, bdir)
	if err != nil {
		return nil, fmt.Errorf("copy backup %s: %w", c.restores[i].Backup, err)
	}
	b, err := readRows(bcp)
	if err != nil {
		// A backup of a store that was already corrupt is what the
		// operator restored: read what it holds.
		var bad int
		if b, bad, err = readRowsDamaged(bcp); err != nil {
			return nil, fmt.Errorf("read backup %s: %w", c.restores[i].Backup, err)
		}
		c.pr.DamagedBackups++
		c.pr.DamagedBackupRanges += bad
	}
	c.backups[i] = b
	return b, nil
}

func sample(l *[]string, a hermestest.Ack) {
	if len(*l) < 5 {
		*l = append(*l, fmt.Sprintf("%s seq %d ts %s", a.Session, a.Seq, strconv.FormatFloat(a.Timestamp, 'f', 6, 64)))
	}
}

func unixSec(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// leftovers lists what is in p's directory that should not be: anything
// but the store's own files (state.db, -wal, -shm), finished captures
// (state.db.retired-wal-*, not .partial), sessions/ (Hermes' and the
// agent's diverted JSONL), profiles/ in the home, and the operator's own
// files the faults made (state.db.old). A main snapshot, a staging
// directory, a quarantined sidecar outside a capture are leftovers.
func leftovers(p *profile) []string {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return []string{fmt.Sprintf("(cannot list %s: %v)", p.dir, err)}
	}
	base := filepath.Base(p.db)
	var out []string
	for _, e := range ents {
		n := e.Name()
		switch {
		case n == base || n == base+"-wal" || n == base+"-shm":
		case e.IsDir() && n == "sessions":
		case e.IsDir() && n == "profiles" && p.name == "default":
		case e.IsDir() && strings.HasPrefix(n, base+".retired-wal-") && !strings.HasSuffix(n, ".partial"):
		case p.isOperatorFile(n):
		default:
			out = append(out, n)
		}
	}
	return out
}
