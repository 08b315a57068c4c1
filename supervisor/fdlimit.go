package supervisor

import (
	"golang.org/x/sys/unix"
)

// The open-file limit and the guards. An armed guard holds up to three
// fds (main, -wal, -shm); at 10,000 live stores that is 30,000, past many
// hosts' limit (Go raises the soft limit to the hard one at start; a shell's
// hard limit is often 4,096 to 65,536, systemd's default 524,288). Running
// out would not only leave the rest unguarded: the holder scan, the pins
// of an incident and the journal need fds too, and an EMFILE there turns
// verdicts unknown and incidents stuck. So guards get a budget: what the
// limit leaves after a reserve for everything else; a store past it is
// still watched, scanned and reconciled, its guard unavailable (said once,
// guard.fdlimit, and in its status), and it arms at a later check once
// another guard lets go.

// guardFDs is what one armed guard holds at most.
const guardFDs = 3

// EventGuardFDLimit: the open-file limit leaves no fds for another guard.
const EventGuardFDLimit = "guard.fdlimit"

// reasonFDLimit is the guard status of a store past the budget.
const reasonFDLimit = "the open-file limit leaves no fds for another guard (raise LimitNOFILE= or ulimit -n)"

// minFDReserve is the fewest fds guards leave for everything else. The
// sockets take a bounded part of it: the control socket at most
// maxControlConns, the metrics endpoint defaultMetricsLimits.maxConns (a
// connection past either cap holds no fd for long, or none), so a local
// user's connections leave the scan, the pins and the captures at least
// minFDReserve less socketFDs (TestSocketCapsLeaveTheReserve).
const minFDReserve = 256

// socketFDs is what the two listening servers may hold at once.
var socketFDs = maxControlConns + defaultMetricsLimits.maxConns

// guardBudget is how many guards the open-file limit leaves room for:
// limit (0: the process's RLIMIT_NOFILE) less a quarter of it (at least
// minFDReserve) for the scan, the pins, the journal and the sockets.
func guardBudget(limit int) int64 {
	if limit <= 0 {
		var rl unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY || rl.Cur > 1<<30 {
			return 1 << 30 // no bound worth counting
		}
		limit = int(rl.Cur)
	}
	reserve := max(limit/4, minFDReserve)
	return int64(max(limit-reserve, 0) / guardFDs)
}

// guardRoom reports whether one more guard of the store's owner (uid)
// fits the budget and the owner's share of it (guard_share.go); replacing
// an armed one (same store, new generation) always does. why is the
// guard's status when it does not. The count may run over by the few arms
// in flight at once, which the reserve absorbs.
func (a *Agent) guardRoom(replacing bool, uid int) (ok bool, why string) {
	if replacing {
		return true, ""
	}
	ok, why, first := a.shares.room(uid, a.armed.Load(), a.guardBudget)
	switch {
	case ok:
	case why == reasonOwnerShare && first:
		a.log.Warn("guard share reached for a user: their stores past it are watched and scanned but not guarded",
			"event", EventGuardFDLimit, "uid", uid, "guards", a.guardBudget,
			"hint", "the open-file budget for guards is shared by the users with stores; raise the agent's open-file limit (LimitNOFILE=) for more")
	case why == reasonFDLimit && !a.fdLimitSaid.Swap(true):
		a.log.Warn("open-file limit reached for guards: stores past it are watched and scanned but not guarded",
			"event", EventGuardFDLimit, "guards", a.guardBudget,
			"hint", "raise the agent's open-file limit (LimitNOFILE= in its unit, ulimit -n) to about 3 per live store plus a quarter")
	}
	return ok, why
}
