// Package incident is the incident engine: what happens to one store's
// orphaned generation, from the moment detection hands it over to its
// resolution (docs/design.md §7, "The incident protocol"), as one explicit state
// machine.
//
// The engine of a store is driven by that store's worker, one goroutine,
// so the steps of a store are serialized. The worker detects (a generation
// changed under a live process), freezes what the fast path can, and calls
// Open; it calls Advance on every wake (a change, a tick, a holder that
// exited, a replay job done), Resume for each incident a previous agent
// left unfinished, and Release when an operator decides for a held one.
// Everything the engine does to processes and files goes through the
// Procs and Salvage interfaces (Host and Recovery on a real host), its
// record through the journal, so the machine is tested without a single
// process (engine_test.go, resume_test.go).
//
// # States
//
// An incident's state is the journal's: one per protocol step that has
// completed, forward only along the main line, plus needs_action (an
// operator must act, e.g. free disk space; the orphan stays pinned, and
// the step that failed is retried) and the terminal failed. What an
// incident waits for in a state (the hold policy, a retry after a full
// disk, a terminate grace period, its holders' exit, its replay jobs) is
// one pending value, never a state of its own.
//
// The state table (table.go's newTable; TestDiagramMatchesTable fails
// when this drawing and the table disagree):
//
//	open          -> pinned released failed
//	frozen        -> pinned released needs_action failed
//	pinned        -> released needs_action captured failed
//	released      -> captured needs_action failed
//	needs_action  -> released captured failed
//	captured      -> diverted resolved unrecoverable
//	diverted      -> replaying unrecoverable
//	replaying     -> resolved failed
//	resolved      (terminal)
//	failed        (terminal)
//	unrecoverable (terminal)
//
// The main line, drawn:
//
//	open, frozen ─▶ pinned ─▶ released ─▶ captured ─▶ diverted ─▶ replaying ─▶ resolved
//	                  │    ▲      │    ▲
//	                  └─▶ needs_action ┘     a capture failed; retried
//
// (frozen goes to needs_action too, when nothing could be pinned and the
// capture of a mispaired store's quarantined sidecars failed), and
// failed from the states before the capture and from replaying, when
// the agent gives up (it says why); unrecoverable from the divert, when the capture
// cannot be used (its WAL fits no main and its page images gave nothing,
// or the divert kept failing): the loss is counted and the raw files are
// kept, and nothing retries.
//
// # The protocol
//
// Each state's step, as table.go runs it (stepX in step_*.go):
//
//	Open(detection):
//	    journal the incident: detected (+ frozen)            → open | frozen
//	    run
//
//	open, frozen:                                            stepPin
//	    pin every inode the holders hold (own read-only fds,
//	        read-locked so no orphan can be the last closer) → pinned
//	    nothing pinnable: decide the release in this state (a
//	        mispaired store's quarantined sidecars are captured
//	        before release; failed: keep them frozen → needs_action)
//
//	pinned:                                                  stepRelease
//	    prepare while frozen: sidecar_lost finishes a checkpoint a
//	        holder was stopped in, then snapshots the shared main under
//	        a read transaction; mispaired quarantines the old sidecars
//	        into a staging capture; rewritten waits until its rewriter
//	        is done with the main, then quarantines them likewise
//	    no holder at all (an unlinked -wal of an idle store)  → released
//	    policy hold: wait for agentctl release
//	    holders frozen: capture now, while they are stopped
//	        failed (disk full): keep them frozen              → needs_action, retry
//	    signal per policy (terminate, kill, resume, observe)  → released
//
//	released:                                                stepCapture
//	    holders still running: wait for their exit; terminate's grace
//	        over: SIGKILL
//	    the capture taken before release still exact: adopt it
//	    else capture the pinned orphan
//	        failed: keep it pinned                            → needs_action, retry
//	    unpin                                                 → captured
//
//	needs_action:                                            stepRetry
//	    entered before release: capture again, then signal    → released
//	    entered later: the final capture again               → captured
//
//	captured:                                                stepDivert
//	    generic store: nothing to replay                     → resolved
//	    divert the rows only the capture has, as Hermes JSONL → diverted
//	        its WAL fits no main: rows from the WAL's page
//	            images (walsalvage), the rest counted         → diverted
//	            nothing usable                                → unrecoverable
//	        failed: retry every 30 s; the 5th failure          → unrecoverable
//
//	diverted:                                                stepQueue
//	    one replay job per session file                      → replaying
//
//	replaying:                                               stepJobs
//	    every job done                                       → resolved
//	    a job gave up                                        → failed
//
//	Resume(journal record):
//	    holders: the journaled ones still alive (same pid, same start)
//	    none left and no capture taken                       → failed
//	    none left, a capture taken before release            → captured
//	    pin them again; released before: a new grace period
//
// Every state change goes through enter (transition.go): it refuses a
// move the table does not list, journals the step with what it learned in
// one transaction, and only once that is committed moves the incident and
// the incidents gauge; a write that fails leaves the incident where the
// journal says, and the step runs again at the next wake. Journal writes do not
// use the engine's context, so the step in flight when the agent stops is
// recorded as done, never half. Steps are idempotent: after a crash, the
// step of the journaled state runs again and reaches the same outcome
// (TestCrashResumeEveryPoint kills the agent at every step and every
// journal write of a run).
//
// # Extending it
//
// A new incident kind is one more kindSpec (what to prepare while frozen,
// how the capture treats the main). A new terminal state is one more
// table entry with terminal set, named in the next list of the states
// that reach it, and in the drawing above. A
// per-step identity check (is every pin still the inode recorded, is the
// profile directory still the one discovered) is an entry's verify func:
// it runs before the step and sends the incident to needs_action.
package incident
