package incident

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/stateguard/stateguard/journal"
)

// Newer Hermes processes notice a replaced store themselves and append
// the rows they could not write to <profile home>/sessions/<id>.jsonl.
// While an incident is open, lines appended to those files are queued for
// replay from that same path (so the recovery ids are the ones `hermes
// sessions import --from diverted` computes, and running both never
// duplicates). Lines already there when the generation changed, and
// files outside an incident, are old transcripts: left alone.

// sessionsDir is the profile's Hermes sessions directory.
func (e *Engine) sessionsDir() string { return filepath.Join(filepath.Dir(e.st.Path), "sessions") }

// markHermesDiverts remembers how far every session JSONL is old
// transcript: up to its last line stamped before the change
// (hermes_mark.go).
func (e *Engine) markHermesDiverts(li *live) {
	li.marks = map[string]int64{}
	since := li.divertSince()
	for _, f := range e.sessionFiles() {
		li.marks[f.path] = hermesMark(f.path, f.size, since)
	}
}

type sessionFile struct {
	path string
	size int64
}

// sessionFiles lists the regular *.jsonl files directly in sessions/
// (never following a symlink: a link is not Hermes' file), read through
// the profile directory's handle (readStoreSubdir).
func (e *Engine) sessionFiles() []sessionFile {
	all, err := readStoreSubdir(e.st, "sessions")
	if err != nil {
		return nil
	}
	out := all[:0]
	for _, f := range all {
		if strings.HasSuffix(f.path, ".jsonl") {
			out = append(out, f)
		}
	}
	return out
}

// followHermesDiverts queues, for every session file that grew since the
// incident opened (or since it was last queued), a job replaying its new
// complete lines.
func (e *Engine) followHermesDiverts(li *live) {
	if li.marks == nil || li.state.Terminal() {
		return
	}
	for _, f := range e.sessionFiles() {
		mark := li.marks[f.path] // a new file: from its first line
		if f.size <= mark {
			continue
		}
		data, err := os.ReadFile(f.path)
		if err != nil {
			continue
		}
		end := bytes.LastIndexByte(data, '\n') + 1 // complete lines only
		if int64(end) <= mark {
			continue
		}
		from := bytes.Count(data[:mark], []byte{'\n'}) + 1
		ctx, cancel := e.journalCtx()
		job, err := e.d.Journal.EnqueueJob(ctx, journal.Job{IncidentID: li.id, Store: e.st.Path, Path: f.path, FromLine: from})
		cancel()
		if err != nil {
			e.log.Error("queue replay of Hermes' own divert failed", "incident", li.id, "path", f.path, "err", err)
			continue
		}
		li.marks[f.path] = int64(end)
		e.emit(slog.LevelInfo, "lines Hermes diverted during the incident queued for replay", EventReplayQueued, li,
			"job", job.ID, "path", f.path, "from_line", from, "at", e.d.Now().UTC())
	}
}
