package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
)

// readProcStatusFor reads the running agentd's status when its lock file
// names a live pid, since the daemon's privileges are what matter; else
// this process's, which is what `agentd run` from here would get.
func readProcStatusFor(in doctorInput, stateDir string) procStatus {
	if in.goos != "linux" {
		return procStatus{who: fmt.Sprintf("uid %d", in.euid), euid: in.euid}
	}
	path, who := in.procStatus, fmt.Sprintf("this user (uid %d; agentd is not running)", in.euid)
	if path == "" {
		path = "/proc/self/status"
		// The lock file keeps the pid of an agent that died; only a live
		// process that is an agentd counts (never lock the file to find
		// out: a starting agent would take that for another instance).
		if pid := lockPid(stateDir); pid > 0 {
			if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && strings.HasPrefix(filepath.Base(exe), "agentd") {
				path, who = fmt.Sprintf("/proc/%d/status", pid), fmt.Sprintf("agentd (pid %d)", pid)
			}
		}
	} else {
		who = fmt.Sprintf("uid %d", in.euid)
	}
	ps := parseProcStatus(path)
	ps.who = who
	if ps.euid < 0 {
		ps.euid = in.euid
	}
	return ps
}

func lockPid(stateDir string) int {
	if stateDir == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(stateDir, control.LockFile))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func parseProcStatus(path string) procStatus {
	ps := procStatus{euid: -1}
	f, err := os.Open(path)
	if err != nil {
		ps.err = err
		return ps
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	found := false
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		switch {
		case k == "CapEff" && len(fields) == 1:
			ps.capEff, err = strconv.ParseUint(fields[0], 16, 64)
			if err != nil {
				ps.err = fmt.Errorf("%s: CapEff %q: %w", path, fields[0], err)
				return ps
			}
			found = true
		case k == "Uid" && len(fields) >= 2:
			if uid, err := strconv.Atoi(fields[1]); err == nil {
				ps.euid = uid
			}
		}
	}
	if err := sc.Err(); err != nil {
		ps.err = fmt.Errorf("read %s: %w", path, err)
	} else if !found {
		ps.err = fmt.Errorf("%s has no CapEff line", path)
	}
	return ps
}

func missingCaps(eff uint64) []string {
	var out []string
	for _, c := range neededCaps {
		if eff&(1<<c.bit) == 0 {
			out = append(out, c.name)
		}
	}
	return out
}

// capsFix points at the system service, whose unit grants the
// capabilities to that one process. File capabilities (setcap on the
// binary) would hand them to every local user who can run agentd.
const capsFix = "run agentd as the system service (`sudo agentd install && sudo agentd start`): its unit gives the capabilities to the service alone; do not put file capabilities on the agentd binary, which every local user can run"

func checkPrivileges(in doctorInput, ps procStatus) checkResult {
	r := checkResult{Name: "privileges"}
	if in.goos != "linux" {
		if in.euid == 0 {
			r.Status, r.Summary = statusOK, "running as root"
			return r
		}
		r.Status = statusWarn
		r.Summary = fmt.Sprintf("uid %d is not root: only your own processes can be scanned and frozen", in.euid)
		r.Fix = "install the system service as root: `sudo agentd install`"
		return r
	}
	if ps.err != nil {
		r.Status, r.Summary = statusWarn, fmt.Sprintf("cannot read the capabilities of %s: %v", ps.who, ps.err)
		r.Fix = "run agentctl doctor as root or as agentd's user"
		return r
	}
	missing := missingCaps(ps.capEff)
	switch {
	case len(missing) == 0 && ps.euid == 0:
		r.Status, r.Summary = statusOK, fmt.Sprintf("%s runs as root with every capability it needs", ps.who)
	case len(missing) == 0:
		r.Status, r.Summary = statusOK, fmt.Sprintf("%s has %s", ps.who, capNames())
	case ps.euid == 0:
		// Root with a reduced bounding set: a container without
		// --cap-add, or a unit that drops them.
		r.Status = statusFail
		r.Summary = fmt.Sprintf("%s is root but lacks %s: other users' holders cannot be scanned or frozen", ps.who, strings.Join(missing, " "))
		r.Fix = "grant " + strings.Join(missing, " ") + " (the unit's CapabilityBoundingSet, or docker --cap-add)"
	default:
		// The per-user service runs like this by design, so it is a
		// warning, but its limits are real: a root process holding a
		// store cannot be inspected, so such scans say unknown.
		r.Status = statusWarn
		r.Summary = fmt.Sprintf("%s is not root and lacks %s: processes of other users (root's backups and restores too) cannot be inspected or frozen, so holder scans say unknown", ps.who, strings.Join(missing, " "))
		r.Fix = capsFix
	}
	return r
}

func capNames() string {
	var n []string
	for _, c := range neededCaps {
		n = append(n, c.name)
	}
	return strings.Join(n, " ")
}

// checkHidepid reads /proc's mount options: with hidepid, a process of
// another user is invisible to an unprivileged scan, which then cannot
// even say it is blind.
func checkHidepid(in doctorInput, ps procStatus) checkResult {
	r := checkResult{Name: "proc hidepid"}
	if in.goos != "linux" {
		r.Status, r.Summary = statusOK, "not applicable on "+in.goos
		return r
	}
	m, err := procMount(in.mountinfo)
	if err != nil {
		r.Status, r.Summary = statusWarn, fmt.Sprintf("cannot tell how /proc is mounted: %v", err)
		r.Fix = "check `findmnt /proc`: with hidepid, run agentd as root"
		return r
	}
	opts, hide := m.Options, ""
	if m.HidePID != "" {
		hide = "hidepid=" + m.HidePID
	}
	switch {
	case hide == "":
		r.Status, r.Summary = statusOK, "/proc shows every process ("+opts+")"
	case ps.err == nil && ps.capEff&(1<<19) != 0:
		r.Status, r.Summary = statusOK, fmt.Sprintf("/proc is mounted %s, but %s has CAP_SYS_PTRACE and sees every process", hide, ps.who)
	case !m.Hides():
		r.Status = statusWarn
		r.Summary = fmt.Sprintf("/proc is mounted %s: %s cannot inspect other users' processes, so holder scans near them say unknown", hide, ps.who)
		r.Fix = "run agentd as root (or with CAP_SYS_PTRACE), or add its user to the group named by the /proc mount's gid= option"
	default:
		r.Status = statusWarn
		r.Summary = fmt.Sprintf("/proc is mounted %s: %s cannot see other users' processes, so a holder they run is missed", hide, ps.who)
		r.Fix = "run agentd as root (or with CAP_SYS_PTRACE), or add its user to the group named by the /proc mount's gid= option"
	}
	return r
}

// procMount reads the proc mount at /proc from a mountinfo file.
func procMount(mountinfo string) (holders.ProcMount, error) {
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return holders.ProcMount{}, err
	}
	m, ok := holders.ParseProcMount(b)
	if !ok {
		return holders.ProcMount{}, fmt.Errorf("no proc mount at /proc in %s", mountinfo)
	}
	return m, nil
}

// inotifyHeadroom is how many watches beyond agentd's own the per-user
// budget should leave: the limit counts every program of that user.
const inotifyHeadroom = 1024

func checkInotify(in doctorInput, dirs []string) checkResult {
	r := checkResult{Name: "inotify"}
	if in.goos != "linux" {
		r.Status, r.Summary = statusOK, fmt.Sprintf("not applicable on %s (%d directories to watch)", in.goos, len(dirs))
		return r
	}
	watches, werr := readSysctlInt(in.maxWatches)
	instances, ierr := readSysctlInt(in.maxInstances)
	if err := errors.Join(werr, ierr); err != nil {
		r.Status, r.Summary = statusWarn, fmt.Sprintf("cannot read the inotify limits: %v", err)
		r.Fix = "check `sysctl fs.inotify`"
		return r
	}
	need := len(dirs)
	r.Summary = fmt.Sprintf("max_user_watches=%d, max_user_instances=%d for %d directories to watch", watches, instances, need)
	fix := fmt.Sprintf("raise it: `sudo sysctl -w fs.inotify.max_user_watches=%d fs.inotify.max_user_instances=%d`, and persist that in /etc/sysctl.d/90-stateguard.conf",
		max(watches, 2*(need+inotifyHeadroom)), max(instances, 512))
	switch {
	case watches < need || instances < 1:
		r.Status = statusFail
		r.Details = []string{fmt.Sprintf("agentd needs %d watches (one per store directory, home and profiles/ directory); without them some stores are only seen by the reconcile loop, seconds late", need)}
		r.Fix = fix
	case watches < need+inotifyHeadroom || instances < 8:
		r.Status = statusWarn
		r.Details = []string{"the limits are per user and shared with every other program of that user (editors, file managers)"}
		r.Fix = fix
	default:
		r.Status = statusOK
	}
	return r
}

func readSysctlInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}
