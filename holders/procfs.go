package holders

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The /proc text parsers live here, free of build tags, so they are
// tested on every OS.

// procStat is what the scan needs from /proc/<pid>/stat.
type procStat struct {
	State      byte
	PPid       int    // field 4
	Flags      uint64 // field 9, the kernel's PF_* flags
	StartTicks uint64
}

// pfKthread is PF_KTHREAD: a kernel thread, which has no fd table and
// never holds a file.
const pfKthread = 0x00200000

// Kthread reports whether the process is a kernel thread.
func (st procStat) Kthread() bool { return st.Flags&pfKthread != 0 }

// parseProcStat parses /proc/<pid>/stat. The command name (field 2) may
// hold spaces and parentheses, so fields are counted from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("no ')' in %q", b)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); field 4 (ppid) is f[1]; field 9 (flags)
	// is f[6]; field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("short stat line %q", b)
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return procStat{}, fmt.Errorf("ppid %q: %w", f[1], err)
	}
	flags, err := strconv.ParseUint(string(f[6]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("flags %q: %w", f[6], err)
	}
	ticks, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("starttime %q: %w", f[19], err)
	}
	return procStat{State: f[0][0], PPid: ppid, Flags: flags, StartTicks: ticks}, nil
}

// mapsEntry is one line of /proc/<pid>/maps that names a file.
type mapsEntry struct {
	Range        []byte // "start-end", the name under map_files/
	Perms        []byte // "rw-s"
	Major, Minor uint32
	Ino          uint64
	Path         []byte // as the kernel printed it, " (deleted)" included
}

// parseMapsLine parses "start-end perms offset major:minor inode   path".
// ok is false for anonymous mappings and malformed lines.
func parseMapsLine(line []byte) (e mapsEntry, ok bool) {
	var f [5][]byte
	rest := line
	for k := range f {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			return e, false
		}
		f[k], rest = rest[:j], rest[j:]
	}
	path := bytes.TrimLeft(rest, " ")
	if len(path) == 0 || path[0] != '/' {
		return e, false
	}
	maj, min, found := bytes.Cut(f[3], []byte{':'})
	if !found {
		return e, false
	}
	ma, err1 := strconv.ParseUint(string(maj), 16, 32)
	mi, err2 := strconv.ParseUint(string(min), 16, 32)
	ino, err3 := strconv.ParseUint(string(f[4]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || ino == 0 {
		return e, false
	}
	return mapsEntry{Range: f[0], Perms: f[1], Major: uint32(ma), Minor: uint32(mi), Ino: ino, Path: path}, true
}

// SharedWrite reports whether the mapping is shared and writable (rw-s):
// its writes reach the file.
func (e mapsEntry) SharedWrite() bool {
	return len(e.Perms) == 4 && e.Perms[1] == 'w' && e.Perms[3] == 's'
}

// parseStatusIDs reads the effective uid and every group (effective gid
// and supplementary groups) from /proc/<pid>/status.
func parseStatusIDs(b []byte) (euid int, groups []int, err error) {
	euid = -1
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		key, val, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		f := bytes.Fields(val)
		switch string(key) {
		case "Uid":
			if len(f) < 2 {
				return -1, nil, fmt.Errorf("bad Uid line %q", line)
			}
			if euid, err = strconv.Atoi(string(f[1])); err != nil {
				return -1, nil, fmt.Errorf("bad Uid line %q", line)
			}
		case "Gid":
			if len(f) < 2 {
				return -1, nil, fmt.Errorf("bad Gid line %q", line)
			}
			g, err := strconv.Atoi(string(f[1]))
			if err != nil {
				return -1, nil, fmt.Errorf("bad Gid line %q", line)
			}
			groups = append(groups, g)
		case "Groups":
			for _, s := range f {
				g, err := strconv.Atoi(string(s))
				if err != nil {
					return -1, nil, fmt.Errorf("bad Groups line %q", line)
				}
				groups = append(groups, g)
			}
		}
	}
	if euid < 0 || len(groups) == 0 {
		return -1, nil, fmt.Errorf("no Uid/Gid in status")
	}
	return euid, groups, nil
}

// ProcMount is the proc filesystem mounted at /proc, as mountinfo says:
// the last proc mount there, since it hides the ones below it.
type ProcMount struct {
	// Options are the mount's super options, as written ("rw,hidepid=2").
	Options string
	// HidePID is the hidepid option by name: "" (off), "noaccess" (1),
	// "invisible" (2) or "ptraceable" (4).
	HidePID string
}

// ParseProcMount finds the proc mount at /proc in a mountinfo text; ok is
// false when there is none. It reads mountinfo with parseMountinfo, the
// one parser of it: the holder scan and agentctl doctor both use it.
func ParseProcMount(mountinfo []byte) (m ProcMount, ok bool) {
	for _, e := range parseMountinfo(mountinfo) {
		if e.Point != "/proc" || e.FSType != "proc" {
			continue
		}
		m, ok = ProcMount{Options: e.SuperOptions}, true
		for opt := range strings.SplitSeq(m.Options, ",") {
			if v, isHide := strings.CutPrefix(opt, "hidepid="); isHide {
				m.HidePID = hidePIDNames[v]
			}
		}
	}
	return m, ok
}

// hidePIDNames maps hidepid's values, numeric or named, to its names;
// anything unknown counts as the strictest listing restriction.
var hidePIDNames = map[string]string{
	"0": "", "off": "",
	"1": "noaccess", "noaccess": "noaccess",
	"2": "invisible", "invisible": "invisible",
	"4": "ptraceable", "ptraceable": "ptraceable",
}

// Hides reports whether /proc leaves processes out of its listing for a
// process without the privilege to see them: with hidepid=invisible, or
// ptraceable, a scan cannot even say it is blind to them. (With noaccess
// they are listed and their details refused, so a scan knows.)
func (m ProcMount) Hides() bool { return m.HidePID == "invisible" || m.HidePID == "ptraceable" }

// parseInt parses a decimal name (a pid or fd under /proc) without
// allocating; ok is false for anything else.
func parseInt(b []byte) (n int, ok bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// parseNSPid returns a process's pid in its own (innermost) pid namespace
// from /proc/<pid>/status, or 0 when it is in the scan's.
func parseNSPid(status []byte) int {
	for line := range bytes.SplitSeq(status, []byte{'\n'}) {
		v, ok := bytes.CutPrefix(line, []byte("NSpid:"))
		if !ok {
			continue
		}
		f := bytes.Fields(v)
		if len(f) < 2 {
			return 0
		}
		n, err := strconv.Atoi(string(f[len(f)-1]))
		if err != nil {
			return 0
		}
		return n
	}
	return 0
}

// mountEntry is one line of /proc/<pid>/mountinfo.
type mountEntry struct {
	ID    int
	Dev   uint64 // the superblock's device, in Linux's stat(2) encoding
	Root  string // the directory of the filesystem mounted here
	Point string // where it is mounted, in the reader's root
	// FSType and SuperOptions follow the " - " separator ("proc",
	// "rw,hidepid=2"); "" when the line has none.
	FSType, SuperOptions string
}

// parseMountinfo parses "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1
// - ext3 /dev/root rw". Lines it cannot read are skipped.
func parseMountinfo(b []byte) []mountEntry {
	var out []mountEntry
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		f := bytes.Fields(line)
		if len(f) < 5 {
			continue
		}
		id, err := strconv.Atoi(string(f[0]))
		if err != nil {
			continue
		}
		maj, mnr, ok := bytes.Cut(f[2], []byte{':'})
		if !ok {
			continue
		}
		ma, err1 := strconv.ParseUint(string(maj), 10, 32)
		mi, err2 := strconv.ParseUint(string(mnr), 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		m := mountEntry{ID: id, Dev: linuxMkdev(ma, mi), Root: unescapeMount(f[3]), Point: unescapeMount(f[4])}
		// Optional fields come before the separator; fstype source
		// superopts after it.
		if i := slices.IndexFunc(f[5:], func(b []byte) bool { return string(b) == "-" }); i >= 0 {
			if rest := f[5+i+1:]; len(rest) >= 3 {
				m.FSType, m.SuperOptions = string(rest[0]), string(rest[2])
			}
		}
		out = append(out, m)
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(b []byte) string {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b)
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+3 < len(b) {
			if n, err := strconv.ParseUint(string(b[i+1:i+4]), 8, 8); err == nil {
				out = append(out, byte(n))
				i += 3
				continue
			}
		}
		out = append(out, b[i])
	}
	return string(out)
}

// hostPathOf translates a path as a process of another mount namespace
// sees it (holder, on the mount m of its table) to where the scan's own
// mount table (ours) shows the same file. prefer picks among several
// places (bind mounts of one filesystem). "" when no mount of ours shows
// that part of the filesystem.
func hostPathOf(holder string, m mountEntry, ours []mountEntry, prefer func(string) bool) string {
	rel, ok := under(holder, m.Point)
	if !ok {
		return ""
	}
	fsPath := joinRel(m.Root, rel)
	best, bestLen := "", -1
	for _, h := range ours {
		if h.Dev != m.Dev {
			continue
		}
		r, ok := under(fsPath, h.Root)
		if !ok {
			continue
		}
		p := joinRel(h.Point, r)
		if prefer != nil && prefer(p) {
			return p
		}
		if len(h.Root) > bestLen {
			best, bestLen = p, len(h.Root)
		}
	}
	return best
}

// under returns p relative to dir ("/x" for dir/x, "" for dir itself).
func under(p, dir string) (string, bool) {
	if dir == "/" {
		return p, strings.HasPrefix(p, "/")
	}
	if p == dir {
		return "", true
	}
	if strings.HasPrefix(p, dir) && p[len(dir)] == '/' {
		return p[len(dir):], true
	}
	return "", false
}

func joinRel(dir, rel string) string {
	if rel == "" {
		return dir
	}
	if dir == "/" {
		return rel
	}
	return dir + rel
}
