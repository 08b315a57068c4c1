package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/service"
)

// The residual risk of the locks rule, said the same way wherever it is.
const locksRuleRisk = "residual risk of the locks rule: a process that reads a store without SQLite (cp, cat, a backup tool) " +
	"or a SQLite connection in DELETE journal mode between transactions holds no lock, so one that cannot be inspected " +
	"is not seen; Hermes stores are always in WAL mode, where every connection holds its locks as long as it is open. " +
	"verdict = \"strict\" counts every uninspectable process instead"

// checkVerdictRule explains the rule holder scans judge by, and what an
// agent at this privilege level can and cannot see and freeze.
func checkVerdictRule(in doctorInput, cfg *service.Config, ps procStatus) checkResult {
	r := checkResult{Name: "holder verdict", Status: statusOK}
	rule := cfg.Verdict
	if rule == "" {
		rule = holders.RuleLocks
	}
	full := ps.err == nil && len(missingCaps(ps.capEff)) == 0
	if in.goos != "linux" {
		return verdictOnDarwin(r, rule, in.euid)
	}
	switch rule {
	case holders.RuleStrict:
		r.Summary = "rule strict: any process that could open a store and cannot be inspected makes its verdict unknown (status exits 3, restore refuses)"
	default:
		r.Summary = "rule locks: a process that cannot be inspected and holds no lock on any inode of a store (so is no live SQLite connection in WAL mode) " +
			"is summarized instead of making the verdict unknown; one that holds a lock is a holder, by its lock"
		if n, err := countLocks(in.locks); err != nil {
			r.Status = statusWarn
			r.Details = append(r.Details, fmt.Sprintf("cannot read %s (%v): the locks rule has no evidence, so it counts every uninspectable process as the strict rule does", in.locks, err))
			r.Fix = "mount /proc as usual so that /proc/locks is readable (it is for every user)"
		} else {
			r.Details = append(r.Details, fmt.Sprintf("lock table: %s readable, %d locks now", in.locks, n))
		}
		r.Details = append(r.Details, locksRuleRisk)
	}
	if full {
		r.Details = append(r.Details, ps.who+" inspects every process (fds, mappings, whether each can write) except those beyond its own "+
			"privileges (another container's init, an LSM); it freezes and kills only through a pidfd after a start-time check")
		return r
	}
	r.Details = append(r.Details,
		fmt.Sprintf("%s sees the fds and mappings of uid %d's processes only; of other users' processes, only their locks: "+
			"a live SQLite connection to a store is listed as a holder (pid, role, current or orphan) with access unknown", ps.who, ps.euid),
		"it cannot see another user's non-SQLite reader (root's cp of a store), nor its own undumpable processes, which make scans unknown under every rule",
		fmt.Sprintf("it can freeze and kill only uid %d's processes: an orphan holder of another user is reported, not stopped", ps.euid))
	if r.Status == statusOK {
		r.Status = statusWarn
		r.Fix = "install the system service as root (`sudo agentd install`) to inspect and freeze every user's processes"
	}
	if rule == holders.RuleStrict {
		r.Fix = "set verdict = \"locks\" (the default) in " + orNone(cfg.Path) + ": other users' processes with no lock on a store then leave its verdict alone; or run the system service as root"
	}
	return r
}

// verdictOnDarwin: libproc shows other users' fds only to root, and
// macOS has no lock table an unprivileged process may read.
func verdictOnDarwin(r checkResult, rule holders.Rule, euid int) checkResult {
	r.Summary = fmt.Sprintf("rule %s; macOS has no system-wide lock table, so the locks rule has no evidence there and judges as the strict rule does", rule)
	if euid == 0 {
		r.Details = append(r.Details, "as root (the LaunchDaemon) libproc shows every process's fds: verdicts are precise")
		return r
	}
	r.Status = statusWarn
	r.Details = append(r.Details,
		fmt.Sprintf("uid %d (a LaunchAgent) sees only its own processes' fds: libproc refuses other users' to anyone but root", euid),
		"its verdict is unknown while any other user's process (root's daemons included) could open the store, and it can freeze only its own processes")
	r.Fix = "install the LaunchDaemon as root (`sudo agentd install`) for precise verdicts"
	return r
}

func countLocks(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return bytes.Count(b, []byte("\n")), nil
}
