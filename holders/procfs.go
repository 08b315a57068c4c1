package holders

import (
	"bytes"
	"fmt"
	"strconv"
)

// The /proc text parsers live here, free of build tags, so they are
// tested on every OS.

// procStat is what the scan needs from /proc/<pid>/stat.
type procStat struct {
	State      byte
	StartTicks uint64
}

// parseProcStat parses /proc/<pid>/stat. The command name (field 2) may
// hold spaces and parentheses, so fields are counted from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("no ')' in %q", b)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("short stat line %q", b)
	}
	ticks, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("starttime %q: %w", f[19], err)
	}
	return procStat{State: f[0][0], StartTicks: ticks}, nil
}

// mapsEntry is one line of /proc/<pid>/maps that names a file.
type mapsEntry struct {
	Range        []byte // "start-end", the name under map_files/
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
	return mapsEntry{Range: f[0], Major: uint32(ma), Minor: uint32(mi), Ino: ino, Path: path}, true
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

// hidesProcesses reports whether a /proc/self/mountinfo says /proc is
// mounted with hidepid=2 (invisible): other users' processes are then not
// listed at all, so a scan by an unprivileged user cannot see them.
func hidesProcesses(mountinfo []byte) bool {
	for line := range bytes.SplitSeq(mountinfo, []byte{'\n'}) {
		f := bytes.Fields(line)
		if len(f) < 5 || string(f[4]) != "/proc" {
			continue
		}
		// Super options are the last field, after the " - fstype source" separator.
		for opt := range bytes.SplitSeq(f[len(f)-1], []byte{','}) {
			switch string(opt) {
			case "hidepid=2", "hidepid=invisible":
				return true
			}
		}
	}
	return false
}

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
