package supervisor

import (
	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/modwatch"
)

// A write into a live main by a process the worker has not vouched for
// (see rewrite.go): whose it is, and what the worker does about it.

// foreignWrite handles a write of pid into the store's main: a
// connection's checkpoint (known, or one that opened the store since the
// last scan), a rewrite, or what a tool did on the way to one.
func (w *worker) foreignWrite(ev modwatch.Event) {
	if w.rewriting(ev.Pid) {
		return
	}
	gated, wasGated := w.takeGated(ev.Pid)
	defer func() {
		if wasGated && gated.frozen != nil {
			w.releaseGated(gated, "the process held at its open for writing is a connection of the store")
		}
	}()
	// A main smaller than at the last write a connection made was
	// truncated: cp opens it O_TRUNC. No connection of a live store cuts
	// its main short but a VACUUM's checkpoint, which holds the sidecars.
	size, _ := fileid.Lstat(w.st.Path)
	known, conn := w.knownConnection(ev, size)
	if conn {
		return
	}
	w.rws.inspecting.Lock()
	defer w.rws.inspecting.Unlock()
	_, unhold := w.holdOwnCheckpoints()
	defer unhold()
	truncated := size.Exists && size.ID == ev.ID && size.Size < w.rws.mainSize.Load()
	if w.restorer(holders.ProcRef{Pid: ev.Pid}) {
		return
	}
	// Look at the writer first (a rsync or cp may be gone within a
	// millisecond): a connection that opened the store since the last
	// scan has its -wal and -shm open, and nobody is frozen for it.
	wal, _ := fileid.Lstat(w.target.RolePath(holders.RoleWAL))
	if !wal.Exists {
		w.writeWithoutWAL(ev, &gated, wasGated, size)
		return
	}
	w.judgeWriter(ev, known, &gated, wasGated, size, wal, truncated)
}

// knownConnection reports whether the write is a connection's the worker
// already knows (vouched for, or a connection in the last scan), and
// returns what the cache knows of the store's holders.
func (w *worker) knownConnection(ev modwatch.Event, size fileid.State) (holders.StoreResult, bool) {
	if w.vouched(ev.Pid) {
		w.rws.mainSize.Store(size.Size)
		w.racedRewrite(ev)
		return holders.StoreResult{}, true
	}
	// A connection the last scan saw is no rewriter: it is vouched for
	// before the agent's checkpoints are held, which yields a running
	// replay. A live writer checkpoints every few hundred milliseconds;
	// yielding to each of its writes kept a slow replay from ever
	// finishing (CI's TestSidecarLostIncident under -race).
	known, _ := w.a.cache.Known(w.target)
	if p := findPid(known.Holders, ev.Pid); p != nil && connection(p) {
		if p.StartTicks != 0 {
			w.vouch(holders.ProcRef{Pid: p.Pid, StartTicks: p.StartTicks})
		}
		w.rws.mainSize.Store(size.Size)
		w.racedRewrite(ev)
		return known, true
	}
	return known, false
}

// writeWithoutWAL handles a foreign write into a main with no -wal at
// the path. No WAL-mode connection has the store open then (SQLite
// removes the -wal only as the last closer), so no live WAL can be paired
// with these pages: it is a connection creating the store (rollback mode
// until journal_mode=WAL), SQLite's last closer after unlinking its
// sidecars, or a rewrite of an idle store; what it leaves at the paths is
// the check's (sidecar_lost when a writer still holds an unlinked WAL).
func (w *worker) writeWithoutWAL(ev modwatch.Event, gated *gatedSeen, wasGated bool, size fileid.State) {
	if !wasGated || gated.frozen == nil {
		w.rws.mainSize.Store(size.Size)
		return
	}
	// But the gate held this process's open for writing while a live
	// -wal was there (gatedOpen): a tool that rewrote the main and
	// removed the sidecars before its write was looked at (`cp backup
	// state.db && rm -f state.db-wal state.db-shm`). A rewrite with the
	// gate's cut all the same, or the check takes the unlinked WAL for a
	// sidecar_lost and replays back every row the restore rolled back.
	n := len(gated.frozen)
	w.pendRewrite(rewriteSeen{writer: holders.Process{Pid: ev.Pid}, at: ev.At, frozen: gated.frozen, confirmed: true, cut: gated.cut})
	gated.frozen = nil
	w.log.Warn("the live main was rewritten and its sidecars removed by a process that is no connection of the store",
		"event", EventRewriteDetected, "pid", ev.Pid, "frozen", n, "confirmed", true)
	w.kick(ev.At)
}

// judgeWriter looks at a foreign writer of a main with a live -wal, the
// store's writers frozen meanwhile: a connection that opened the store
// since the last scan is vouched for and they are thawed; a last closer
// between its unlinks is left to the check; anything else is a rewrite.
func (w *worker) judgeWriter(ev modwatch.Event, known holders.StoreResult, gated *gatedSeen, wasGated bool, size, wal fileid.State, truncated bool) {
	shm, _ := fileid.Lstat(w.target.RolePath(holders.RoleSHM))
	isConn := func(pk holders.Peek) bool {
		return (wal.Exists && pk.Open[wal.ID]) || (shm.Exists && pk.Open[shm.ID])
	}
	pk, err := holders.PeekFDs(ev.Pid, ev.ID, wal.ID, shm.ID)
	if err == nil && isConn(pk) {
		w.vouch(pk.Ref)
		w.rws.mainSize.Store(size.Size)
		return
	}

	frozen := w.freezeWriters(known.Holders, ev.Pid, ev.At)
	for pid, f := range gated.frozen {
		if dup, ok := frozen[pid]; ok {
			w.stops.drop(dup.ref) // one frozenProc, one claim
		}
		frozen[pid] = f // stopped since its open(2), before this write
	}
	gated.frozen = nil
	if err == nil && !pk.Open[ev.ID] {
		// cp's first event is the O_TRUNC of its open(2), before the
		// new fd is in its table: look again, the writers frozen.
		pk, err = peekWriter(ev, wal.ID, shm.ID)
		if err == nil && isConn(pk) {
			w.thawAll(frozen, "the write into the main was a SQLite connection's, not a rewrite")
			w.vouch(pk.Ref)
			return
		}
	}
	if !truncated && sidecarsWent(w.target, wal, shm) {
		// SQLite's last closer checkpoints into the main, then unlinks
		// the -shm and the -wal and closes their fds, all before its
		// main's fd: looked at in between it has the main open and no
		// sidecar, like cp. A rewriter leaves the sidecars alone (and
		// cp truncates); what the closer left is the check's
		// (sidecar_lost when a writer still holds the unlinked WAL).
		// The writers stay stopped for the check the unlinks kicked:
		// it keeps those that hold the orphaned WAL and thaws the rest.
		w.handEarly(frozen)
		w.rws.mainSize.Store(size.Size)
		w.kick(ev.At)
		return
	}
	writer := holders.Process{Pid: ev.Pid}
	if err == nil && pk.Open[ev.ID] && pk.Exe != "" {
		// Seen with the main open and no sidecar: a confirmed rewriter,
		// named by its start time and executable. One already closing
		// down (no fds, no executable) is not: it may have been a
		// connection.
		writer.StartTicks, writer.Exe = pk.Ref.StartTicks, pk.Exe
	}
	// Gone too fast to be looked at (a cp of a small store), but it cut
	// the main short: a rewriter all the same.
	// Held at an open no SQLite connection makes: a rewriter too.
	confirmed := writer.StartTicks != 0 || truncated || wasGated
	w.pendRewrite(rewriteSeen{writer: writer, at: ev.At, frozen: frozen, confirmed: confirmed, cut: gated.cut})
	w.log.Warn("the live main is written by a process that is no connection of the store", "event", EventRewriteDetected, "pid", ev.Pid,
		"exe", writer.Exe, "frozen", len(frozen), "confirmed", confirmed, "truncated", truncated)
	w.kick(ev.At)
}
