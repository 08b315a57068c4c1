package incident

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
)

// A Hermes process notices a replaced store or a lost WAL generation at
// its next write, usually before the agent has opened the incident, and
// diverts from then on: the lines it appended between the change and the
// incident's open belong to the incident, not to the old transcript. So
// the mark of a session file is not its length at the open but the end
// of its last line stamped before the change (less the replace margin);
// the lines after it are queued like the ones appended later. A line
// replayed twice is harmless (same path, same recovery ids: skipped),
// one left out is lost.

// divertSince is when Hermes may have begun to divert: the change less
// the replace margin. For a sidecar_lost incident the change is the
// moment it was seen, which an unlink precedes by the detection's
// latency (or by the agent's downtime); the orphan -wal's ctime (the
// unlink set it, and a Hermes writer writes no frame after it) is used
// when it is earlier. Only there: a -wal still at its path keeps the
// ctime of its last write, which can be long before the change.
func (li *live) divertSince() time.Time {
	since := li.replacedAt
	if li.kind == journal.KindSidecarLost {
		if c, ok := li.orphanWALCtime(); ok && (since.IsZero() || c.Before(since)) {
			since = c
		}
	}
	if since.IsZero() {
		return since
	}
	return since.Add(-replaceMargin)
}

// orphanWALCtime reads the orphan -wal's ctime through a pin, or at the
// incident's open (before any pin) through a holder's fd, checked to be
// the recorded inode.
func (li *live) orphanWALCtime() (time.Time, bool) {
	var st unix.Stat_t
	if p := li.pinOf(holders.RoleWAL); p != nil && p.f != nil && unix.Fstat(int(p.f.Fd()), &st) == nil {
		return time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec)), true
	}
	for _, h := range li.holders {
		for _, f := range h.files {
			if f.Role != holders.RoleWAL || f.Current || f.FD < 0 {
				continue
			}
			err := unix.Stat(fmt.Sprintf("/proc/%d/fd/%d", h.ref.Pid, f.FD), &st)
			if err == nil && fileid.FromStat(&st) == f.ID {
				return time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec)), true
			}
		}
	}
	return time.Time{}, false
}

// markTail bounds how much of a session file's end is read for the mark.
const markTail = 8 << 20

// hermesMark returns how far path counts as old transcript for an
// incident whose generation changed at since; size is its length now.
func hermesMark(path string, size int64, since time.Time) int64 {
	if since.IsZero() || size == 0 {
		return size
	}
	f, err := os.Open(path)
	if err != nil {
		return size
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.ModTime().Before(since) {
		return size // not written since the change
	}
	off := max(size-markTail, 0)
	buf := make([]byte, size-off)
	if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
		return size
	}
	return off + tailMark(buf, off > 0, since)
}

// tailMark walks buf's complete lines backward and returns the offset
// just after the last one stamped before since (or without a stamp).
// cut says buf starts inside the file: its first, partial line is old.
func tailMark(buf []byte, cut bool, since time.Time) int64 {
	end := bytes.LastIndexByte(buf, '\n') + 1
	floor := 0
	if cut {
		floor = bytes.IndexByte(buf, '\n') + 1
	}
	limit := float64(since.UnixNano()) / 1e9
	for end > floor {
		start := bytes.LastIndexByte(buf[:end-1], '\n') + 1
		start = max(start, floor)
		var rec struct {
			Timestamp *float64 `json:"timestamp"`
		}
		if json.Unmarshal(buf[start:end], &rec) != nil || rec.Timestamp == nil ||
			math.IsNaN(*rec.Timestamp) || *rec.Timestamp < limit {
			return int64(end)
		}
		end = start
	}
	return int64(end)
}
