package supervisor

import (
	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// generationRecord is a generation as the journal keeps it.
func generationRecord(g store.Generation) *journal.GenerationRecord {
	fr := func(f fileid.State) journal.FileRecord {
		if !f.Exists {
			return journal.FileRecord{}
		}
		return journal.FileRecord{ID: f.ID, Size: f.Size}
	}
	r := &journal.GenerationRecord{Main: fr(g.Main), WAL: fr(g.WAL), SHM: fr(g.SHM)}
	if h := g.WALHeader; h != nil {
		r.Salt1, r.Salt2 = h.Salt1, h.Salt2
	}
	return r
}
