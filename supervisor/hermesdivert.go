package supervisor

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stateguard/stateguard/journal"
)

// Newer Hermes processes notice a replaced store themselves and append
// the rows they could not write to <profile home>/sessions/<id>.jsonl.
// While an incident is open, lines appended to those files are queued for
// replay from that same path (so the recovery ids are the ones `hermes
// sessions import --from diverted` computes, and running both never
// duplicates). Lines already there when the incident opened, and files
// outside an incident, are old transcripts: left alone.

// sessionsDir is the profile's Hermes sessions directory.
func (w *worker) sessionsDir() string { return filepath.Join(filepath.Dir(w.st.Path), "sessions") }

// markHermesDiverts remembers how long every session JSONL is now.
func (w *worker) markHermesDiverts(li *liveIncident) {
	li.jsonlMarks = map[string]int64{}
	for _, e := range w.sessionFiles() {
		li.jsonlMarks[e.path] = e.size
	}
}

type sessionFile struct {
	path string
	size int64
}

// sessionFiles lists the regular *.jsonl files directly in sessions/
// (never following a symlink: a link is not Hermes' file).
func (w *worker) sessionFiles() []sessionFile {
	dir := w.sessionsDir()
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []sessionFile
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".jsonl") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, sessionFile{path: filepath.Join(dir, e.Name()), size: fi.Size()})
	}
	return out
}

// queueHermesDiverts queues, for every session file that grew since the
// incident opened (or since it was last queued), a job replaying its new
// complete lines.
func (w *worker) queueHermesDiverts(li *liveIncident) {
	if li.jsonlMarks == nil || li.state.Terminal() {
		return
	}
	for _, f := range w.sessionFiles() {
		mark := li.jsonlMarks[f.path] // a new file: from its first line
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
		job, err := w.a.journal.EnqueueJob(w.a.ctx, journal.Job{IncidentID: li.id, Store: w.st.Path, Path: f.path, FromLine: from})
		if err != nil {
			w.log.Error("queue replay of Hermes' own divert failed", "incident", li.id, "path", f.path, "err", err)
			continue
		}
		li.jsonlMarks[f.path] = int64(end)
		w.log.Info("lines Hermes diverted during the incident queued for replay", "event", EventReplayQueued,
			"incident", li.id, "job", job.ID, "path", f.path, "from_line", from, "at", time.Now().UTC())
	}
}
