package incident

import (
	"maps"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/journal"
)

// One record: every field of a live incident that a resumed incident needs
// is journaled with every step the engine writes (write calls toRecord),
// and read back by fromJournal (fromRecord). What is not here cannot be
// journaled or is rebuilt on purpose: the pins (fds; a restart pins
// again), the wait's reason (Resume decides it again), the divert in
// flight (it runs again: it is idempotent), its file list (the same), and
// the Hermes session marks (taken again at resume).

// toRecord writes li's resumable fields into d.
func (li *live) toRecord(d *journal.IncidentDetail) {
	d.Bystanders = nil
	for _, b := range li.bystanders {
		d.Bystanders = append(d.Bystanders, journal.HolderRecord{PID: b.Pid, StartTicks: b.StartTicks})
	}
	d.Quarantine = maps.Clone(li.foreign)
	d.CutWanted, d.CutLate, d.Tries = li.cutWanted, li.cutLate, li.wait.tries
	if li.cut != nil {
		d.WALCut = cutRecord(li.cut, li.cutSource)
	}
	if d.CapturePath == "" {
		// A capture whose own record failed (capture.written): the next
		// record says it, or a resumed incident whose holders are gone
		// would find nothing left to capture while the copy is on disk.
		d.CapturePath, d.CaptureBytes = li.early.dir, li.early.bytes
		if li.capDir != "" {
			d.CapturePath = li.capDir
		}
	}
}

// fromRecord reads back what toRecord wrote.
func (li *live) fromRecord(d journal.IncidentDetail) {
	li.bystanders = nil
	for _, b := range d.Bystanders {
		li.bystanders = append(li.bystanders, holders.ProcRef{Pid: b.PID, StartTicks: b.StartTicks})
	}
	li.foreign = maps.Clone(d.Quarantine)
	li.cutWanted, li.cutLate = d.CutWanted, d.CutLate
	li.wait = pending{tries: d.Tries}
	li.cut = cutFromRecord(d.WALCut)
	if d.WALCut != nil {
		li.cutSource = d.WALCut.Source
	}
	li.early.bytes = d.CaptureBytes // the capture's, what superseding it frees
}
