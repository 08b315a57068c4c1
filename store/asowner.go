package store

import "errors"

// ErrNoImpersonation means AsOwner could not take on the owner's
// filesystem identity (no CAP_SETUID/CAP_SETGID): fn then runs with the
// agent's own, and only the directory checks stand between it and a file
// the owner could not write.
var ErrNoImpersonation = errors.New("cannot act with the owner's filesystem identity")

// AsOwner runs fn with the filesystem identity of the user uid (group
// gid, no supplementary groups) when the agent runs as root and uid is
// another user, and plainly otherwise.
//
// Why: root agentd writes captures, diverts and replayed rows into
// directories its users own. Doing it as their owner means the kernel, not
// only our checks, refuses anything the owner could not do themselves: a
// symlink the owner swaps in between our check and an open by name (SQLite
// opens by name) leads only to files the owner can already write. And the
// hardened unit, which has no CAP_DAC_OVERRIDE, can still create files in
// the user's 0700 home (as that user).
//
// On Linux fn runs on an OS thread of its own (runtime.LockOSThread, never
// unlocked, so the thread is discarded afterwards) whose fsuid, fsgid and
// groups are set with the raw per-thread system calls; goroutines fn
// starts run as the agent. Where the identity cannot be taken (no
// CAP_SETUID), fn still runs and the returned error wraps
// ErrNoImpersonation only when fn itself failed, so the caller's message
// says why.
func AsOwner(uid, gid int, fn func() error) error {
	if uid < 0 || gid < 0 || !needImpersonation(uid) {
		return fn()
	}
	return asOwner(uid, gid, fn)
}
