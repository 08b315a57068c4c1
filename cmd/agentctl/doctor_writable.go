package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/stateguard/stateguard/service"
	"github.com/stateguard/stateguard/store"
)

// systemUnitDirs are where systemd looks for the system unit and its
// drop-ins, highest precedence first.
var systemUnitDirs = []string{"/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}

// unitSandbox is what the installed system unit says about writing: the
// ProtectSystem= mode and ReadWritePaths= after every drop-in.
type unitSandbox struct {
	files          []string // the unit and its drop-ins, as read
	protectSystem  string
	readWritePaths []string
}

// checkServiceWritable: under the hardened system unit agentd can write
// only where ReadWritePaths= lets it, so a home outside them is watched
// and frozen for, but its captures fail (read-only file system). When
// agentd runs, its own mount namespace is the truth, however it was
// started (a drop-in written since it started counts only after a
// restart); otherwise the unit files are.
func checkServiceWritable(in doctorInput, homes []store.Home, stateDir string) checkResult {
	r := checkResult{Name: "writable"}
	if in.goos != "linux" {
		r.Status, r.Summary = statusOK, "no sandbox on "+in.goos+": agentd writes wherever its user may"
		return r
	}
	dirs := in.unitDirs
	if dirs == nil {
		dirs = systemUnitDirs
	}
	sb, installed := readUnitSandbox(dirs)
	var outside []string
	if installed && sb.protectSystem == "strict" {
		for _, h := range homes {
			if !covered(sb.readWritePaths, h.Root) {
				outside = append(outside, h.Root)
			}
		}
	}
	refresh := "`sudo agentd install --refresh && sudo agentd restart` (adds where these homes live to the unit's ReadWritePaths)"
	if mounts, pid := agentdMounts(in, stateDir); mounts != nil {
		var readOnly []string
		for _, h := range homes {
			if mountReadOnly(mounts, h.Root) {
				readOnly = append(readOnly, h.Root)
			}
		}
		if len(readOnly) == 0 {
			r.Status, r.Summary = statusOK, fmt.Sprintf("agentd (pid %d) can write every Hermes home (%d)", pid, len(homes))
			return r
		}
		r.Status, r.Details, r.Fix = statusWarn, readOnly, refresh
		r.Summary = fmt.Sprintf("agentd (pid %d) cannot write %d Hermes home(s): read-only in its mount namespace, so their captures would fail", pid, len(readOnly))
		if installed && len(outside) == 0 && sb.protectSystem == "strict" {
			r.Fix = "`sudo agentd restart` applies the unit's paths"
		}
		return r
	}
	switch {
	case !installed:
		r.Status, r.Summary = statusOK, "no system unit installed and agentd not running: nothing restricts where it writes"
	case sb.protectSystem != "strict":
		r.Status, r.Summary = statusOK, fmt.Sprintf("%s does not set ProtectSystem=strict: homes are writable", sb.files[0])
	case len(outside) > 0:
		r.Status, r.Details, r.Fix = statusWarn, outside, refresh
		r.Summary = fmt.Sprintf("%d Hermes home(s) outside the unit's ReadWritePaths (%s): their captures would fail under the service", len(outside), strings.Join(sb.readWritePaths, " "))
	default:
		r.Status = statusOK
		r.Summary = fmt.Sprintf("every Hermes home (%d) is writable for the service (ReadWritePaths %s)", len(homes), strings.Join(sb.readWritePaths, " "))
	}
	return r
}

func covered(rw []string, path string) bool {
	for _, d := range rw {
		if service.Covers(d, path) {
			return true
		}
	}
	return false
}

// readUnitSandbox reads the system unit in effect and its drop-ins, the
// way systemd merges them: the first directory holding the unit wins, a
// drop-in name in a higher directory hides the same name lower down, and
// drop-ins apply in name order; an empty ReadWritePaths= clears the list.
func readUnitSandbox(dirs []string) (unitSandbox, bool) {
	var sb unitSandbox
	for _, d := range dirs {
		p := filepath.Join(d, service.UnitName)
		if _, err := os.Stat(p); err == nil {
			sb.files = append(sb.files, p)
			break
		}
	}
	if len(sb.files) == 0 {
		return sb, false
	}
	dropIns := map[string]string{}
	for i := len(dirs) - 1; i >= 0; i-- {
		matches, _ := filepath.Glob(filepath.Join(dirs[i], service.UnitName+".d", "*.conf"))
		for _, m := range matches {
			dropIns[filepath.Base(m)] = m
		}
	}
	names := make([]string, 0, len(dropIns))
	for n := range dropIns {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		sb.files = append(sb.files, dropIns[n])
	}
	for _, f := range sb.files {
		sb.apply(f)
	}
	return sb, true
}

func (sb *unitSandbox) apply(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '[':
			section = strings.Trim(line, "[]")
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section != "Service" {
			continue
		}
		switch strings.TrimSpace(k) {
		case "ProtectSystem":
			sb.protectSystem = strings.TrimSpace(v)
		case "ReadWritePaths":
			words := unitWords(v)
			if len(words) == 0 {
				sb.readWritePaths = nil
			}
			for _, w := range words {
				sb.readWritePaths = append(sb.readWritePaths, strings.TrimLeft(w, "-+"))
			}
		}
	}
}

// unitWords splits a unit file value into words as systemd does for
// path lists: whitespace separates, double or single quotes group,
// a backslash escapes, and %% is a literal %.
func unitWords(v string) []string {
	var out []string
	var cur strings.Builder
	inWord, quote, esc := false, rune(0), false
	for _, r := range v {
		switch {
		case esc:
			cur.WriteRune(r)
			esc = false
		case r == '\\':
			esc, inWord = true, true
		case quote != 0 && r == quote:
			quote = 0
		case quote == 0 && (r == '"' || r == '\''):
			quote, inWord = r, true
		case quote == 0 && (r == ' ' || r == '\t'):
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	for i := range out {
		out[i] = strings.ReplaceAll(out[i], "%%", "%")
	}
	return out
}

// mountEntry is one line of a mountinfo file: where, and read-only or not.
type mountEntry struct {
	point    string
	readOnly bool
}

// agentdMounts are the running agentd's mounts (nil when it does not run
// or they cannot be read), and its pid.
func agentdMounts(in doctorInput, stateDir string) ([]mountEntry, int) {
	path, pid := in.agentdMountinfo, 0
	if path == "" {
		pid = runningAgentd(stateDir)
		if pid <= 0 {
			return nil, 0
		}
		path = fmt.Sprintf("/proc/%d/mountinfo", pid)
	}
	m, err := readMountinfo(path)
	if err != nil {
		return nil, 0
	}
	return m, pid
}

// runningAgentd is the pid in the state directory's lock file when that
// process is an agentd (a stale lock file names a dead or reused pid).
func runningAgentd(stateDir string) int {
	pid := lockPid(stateDir)
	if pid <= 0 {
		return 0
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || !strings.HasPrefix(filepath.Base(exe), "agentd") {
		return 0
	}
	return pid
}

func readMountinfo(path string) ([]mountEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent maj:min root mountpoint options [optional...] - fstype source superopts
		a := strings.Fields(sc.Text())
		if len(a) < 6 {
			continue
		}
		ro := false
		for _, o := range strings.Split(a[5], ",") {
			ro = ro || o == "ro"
		}
		out = append(out, mountEntry{point: unescapeMount(a[4]), readOnly: ro})
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountReadOnly reports whether the mount path lives on is read-only: the
// last mount at the longest mount point covering it is the one in effect.
func mountReadOnly(mounts []mountEntry, path string) bool {
	best, ro := -1, false
	for _, m := range mounts {
		if service.Covers(m.point, path) && len(m.point) >= best {
			best, ro = len(m.point), m.readOnly
		}
	}
	return ro
}
