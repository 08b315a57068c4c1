// Command chaos measures stateguard's promise — no acknowledged row lost,
// none duplicated, no store corrupted — by injecting faults at random under
// live writers with the real agentd watching.
//
//	go run ./internal/chaos -cycles 200 -profiles 3 -seed 1 [-guard=false] [-keep]
//
// It builds agentd and the test writer into a temp directory, creates a
// Hermes home there with K profiles (default, p1, ...), starts several test
// writers with ack files (one session each; the writer of p1 cancels its own
// POSIX locks every few commits, the SQLite pitfall of issue 7), and runs
// agentd with the default policies, its state directory and control socket
// inside the temp directory and a 1 s reconcile. Writers that exit (stateguard
// terminated or killed them, or they failed) are restarted after a short
// delay, as a service manager would restart a gateway.
//
// Each cycle injects one fault, picked at random:
//
//	restore-rename      backup taken seconds earlier renamed over state.db, fresh -wal/-shm renamed over the sidecars
//	restore-delete      the same restore, with the sidecars deleted instead
//	unlink-sidecars     -wal and -shm unlinked under the live writers
//	mispaired           a backup renamed over state.db only; the old sidecars stay
//	last-closer         plain `sqlite3 db "select count(*) from messages"` reads next to the lock-cancelling writer
//	kill-agent          kill -9 of agentd, restarted after a random delay (the next faults may land while it is
//	                    down, and on the incidents still in flight)
//	full-disk           the last profile lives on a small tmpfs (root only); it is filled, then a restore or
//	                    unlink makes the agent capture onto the full disk; the space is freed seconds later.
//	                    Never while agentd is down: the writer would fail on the full disk and exit, and its
//	                    close would checkpoint an orphan into the shared main with no agent to stop it, which
//	                    measures the absence of the agent (this corrupted a store in an early run).
//
// Backups are taken with `sqlite3 -readonly db .backup`; the time of every
// restore is recorded per profile, because rows acknowledged before it may
// legitimately be rolled back.
//
// At the end the writers are checked for being left stopped and stopped,
// every incident must resolve and every replay job finish (bounded wait,
// through the control API), the agent must hold no fd on a deleted inode
// under the temp home (a capture left pinned), and per profile: every row
// acknowledged after the profile's last restore is in the healthy store
// exactly once (matched by MessageContent and timestamp), no row is in it
// twice, and PRAGMA integrity_check says ok. One table is printed; the exit
// status is 1 when anything was lost, duplicated or corrupt, a process was
// left stopped, a capture left pinned, an incident unresolved, or (with the
// guard on) a last-closer read orphaned a live WAL. A failed run keeps its
// temp directory (agentd logs, writer logs, acks, backups, chaos.log with the
// fault sequence) and prints where it is.
//
// CI runs a short bounded run from scripts/ci-extra. The long run
// (≥1000 cycles, about 45 minutes on 2 cores) is:
//
//	go run ./internal/chaos -cycles 1000 -profiles 3 -seed 1
//
// Run needs Linux for the process and fd checks and the tmpfs (elsewhere they
// report "unknown" and the full-disk fault is skipped with its reason), the
// sqlite3 CLI on PATH, and root for the tmpfs mount.
package main
