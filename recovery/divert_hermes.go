//go:build unix

package recovery

import (
	"path/filepath"

	"github.com/stateguard/stateguard/store"
)

// HermesLines are lines of one of Hermes' own diverted JSONL files
// (<profile>/sessions/<session>.jsonl) that are queued for replay with
// the incident: from FromLine (1-based) to the end.
type HermesLines struct {
	Path     string
	FromLine int
}

// addHermesLines counts the records of req.HermesLines as present, as
// queuedRows counts other incidents' diverts: their replay writes them.
// Hermes diverts the messages its pending queue holds, and one whose
// commit reported an error although it reached the WAL is in the orphan
// too; written to the incident's own divert as well, it was replayed
// twice, from two paths whose recovery ids differ. A file that cannot be
// read is not counted (warned): the row is then in both trails, never in
// neither.
func addHermesLines(req *DivertRequest) {
	sessions := filepath.Join(filepath.Clean(req.ProfileHome), "sessions")
	for _, hl := range req.HermesLines {
		if filepath.Dir(filepath.Clean(hl.Path)) != sessions {
			continue // not Hermes' own file of this profile
		}
		f, err := openInDir(hl.Path, store.DirID{})
		if err != nil {
			req.logger().Warn("Hermes' diverted lines not counted", "path", hl.Path, "err", err)
			continue
		}
		d, err := ParseDiverted(f)
		f.Close()
		if err != nil {
			req.logger().Warn("Hermes' diverted lines not counted", "path", hl.Path, "err", err)
			continue
		}
		sid := SessionIDFor(hl.Path, "")
		if req.queued == nil {
			req.queued = map[string][]store.Message{}
		}
		for _, r := range d.Records {
			if r.Line >= hl.FromLine {
				req.queued[sid] = append(req.queued[sid], recordMessage(sid, r, 0))
			}
		}
	}
}
