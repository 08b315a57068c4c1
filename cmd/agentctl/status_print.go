package main

// The text form of agentctl status: one block per store.

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
)

// printStatus writes one block per store, then problems, then the daemon.
func printStatus(w io.Writer, st control.Status) {
	if len(st.Stores) == 0 {
		fmt.Fprintln(w, "No stores found.")
	}
	for i, s := range st.Stores {
		if i > 0 {
			fmt.Fprintln(w)
		}
		printStore(w, s, st.Daemon.Running)
	}
	printTail(w, st)
}

// printTail writes the problems and the daemon line.
func printTail(w io.Writer, st control.Status) {
	if len(st.Problems) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Problems:")
		for _, p := range st.Problems {
			line := fmt.Sprintf("  %s: %s", p.Path, p.Error)
			if p.Hint != "" {
				line += " (hint: " + p.Hint + ")"
			}
			fmt.Fprintln(w, cleanCell(line))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, daemonLine(st))
}

func printStore(w io.Writer, s control.StoreStatus, daemon bool) {
	name := s.Profile
	if name == "" {
		name = s.Kind
	}
	fmt.Fprintln(w, cleanCell(fmt.Sprintf("%s  %s", name, s.Path)))
	kv := newTable("  ")
	kv.row("home", fmt.Sprintf("%s (%s)", s.Home, s.Kind))
	kv.row("generation", generationText(s.Generation))
	if s.Error != "" {
		kv.row("error", s.Error)
	}
	kv.row("verdict", verdictText(s))
	if s.Guard != nil {
		g := s.Guard.State
		if !s.Guard.Until.IsZero() {
			g += " until " + stamp(s.Guard.Until)
		}
		if s.Guard.Reason != "" {
			g += " (" + s.Guard.Reason + ")"
		}
		kv.row("guard", g)
	}
	if daemon {
		kv.row("replays", fmt.Sprintf("%d queued", s.QueuedReplays))
	}
	if len(s.HermesDiverts) > 0 {
		kv.row("hermes diverts", divertsText(s.HermesDiverts))
	}
	kv.write(w)
	if len(s.Holders) > 0 {
		printHolderTables(w, s.Holders)
	}
	if len(s.Blind) > 0 {
		fmt.Fprintln(w, "  not inspected (could open the store; the scan cannot vouch for them):")
		t := newTable("    ", "PID", "UID", "REASON")
		for _, b := range s.Blind {
			pid, uid := fmt.Sprint(b.Pid), fmt.Sprint(b.UID)
			if b.Pid == 0 {
				pid = "-"
			}
			if b.UID < 0 {
				uid = "?"
			}
			t.row(pid, uid, b.Reason)
		}
		t.write(w)
	}
	if s.RuleNote != "" {
		fmt.Fprintln(w, cleanCell("  rule: "+s.RuleNote))
	}
	if s.Uninspected.Count > 0 {
		fmt.Fprintln(w, cleanCell("  not inspected: "+s.Uninspected.Summary))
	}
	if daemon && len(s.Incidents) > 0 {
		heading := "  open incidents:"
		for _, in := range s.Incidents {
			if in.State.Terminal() {
				heading = "  incidents (open, and the unrecoverable ones, which keep their raw files):"
			}
		}
		fmt.Fprintln(w, heading)
		t := newTable("    ", "ID", "KIND", "STATE", "POLICY", "OPENED", "NOTE")
		for _, in := range s.Incidents {
			note := in.Error
			if note == "" && in.Capture != "" {
				note = "capture " + in.Capture
			}
			t.row(in.ID, string(in.Kind), string(in.State), in.Policy, stamp(in.OpenedAt), note)
		}
		t.write(w)
	}
}

func generationText(g control.GenerationStatus) string {
	file := func(role string, f control.FileStatus) string {
		if !f.Exists {
			return role + " absent"
		}
		return fmt.Sprintf("%s ino %d", role, f.Ino)
	}
	wal := file("wal", g.WAL)
	if g.WALSalts != "" {
		wal += " salts " + g.WALSalts
	}
	return file("main", g.Main) + " · " + wal + " · " + file("shm", g.SHM)
}

func verdictText(s control.StoreStatus) string {
	v := string(s.Verdict)
	if v == "" {
		v = string(holders.VerdictUnknown)
	}
	var notes []string
	if s.Rule != "" {
		notes = append(notes, "rule "+string(s.Rule))
	}
	if n := len(s.Holders); n > 0 {
		orphans := 0
		for i := range s.Holders {
			if s.Holders[i].Orphan() {
				orphans++
			}
		}
		notes = append(notes, fmt.Sprintf("%d holder(s), %d orphan", n, orphans))
	}
	if n := len(s.Blind); n > 0 {
		notes = append(notes, fmt.Sprintf("%d process(es) not inspected", n))
	}
	if len(notes) > 0 {
		v += " (" + strings.Join(notes, "; ") + ")"
	}
	if !storeSafe(s) {
		v += "  [!]"
	}
	return v
}

// printHolderTables shows one line per holder, then one per file it
// holds: how it was seen, whether it can write it, and its path as the
// host sees it and, when that differs, as the holder does.
func printHolderTables(w io.Writer, ps []holders.Process) {
	fmt.Fprintln(w, "  holders:")
	t := newTable("    ", "PID", "USER", "ROLES", "STATE", "ACCESS", "COMMAND")
	for i := range ps {
		p := &ps[i]
		pid := fmt.Sprint(p.Pid)
		if p.NSPid > 0 {
			pid += fmt.Sprintf(" (%d in its pid namespace)", p.NSPid)
		}
		t.row(pid, userOf(p), strings.Join(rolesOf(p), ","), holderState(p), accessOf(p), commandOf(p))
	}
	t.write(w)
	fmt.Fprintln(w, "  held files:")
	f := newTable("    ", "PID", "ROLE", "STATE", "FD", "ACCESS", "EVIDENCE", "PATH", "AS THE HOLDER SEES IT")
	for i := range ps {
		p := &ps[i]
		for _, h := range p.Files {
			state, fd := "current", fmt.Sprint(h.FD)
			if !h.Current {
				state = "ORPHAN"
			}
			if h.FD < 0 {
				fd = "-"
			}
			host := h.HostPath
			if host == "" {
				host = "?"
			}
			seen := ""
			if h.Path != h.HostPath {
				seen = h.Path
				if seen == "" {
					seen = "? (not inspected)"
				}
			}
			f.row(fmt.Sprint(p.Pid), string(h.Role), state, fd, string(h.Access), evidenceOf(h), host, seen)
		}
	}
	f.write(w)
}

func evidenceOf(h holders.Held) string {
	var e []string
	for _, x := range h.Evidence {
		e = append(e, string(x))
	}
	return strings.Join(e, ",")
}

// accessOf is the holder's access, with why when it is not plain.
func accessOf(p *holders.Process) string {
	a := string(p.Access)
	if a == "" {
		a = string(holders.AccessUnknown)
	}
	switch {
	case !p.Inspected:
		a += " (lock evidence only)"
	case p.ForeignMountNS:
		a += " (other mount namespace)"
	}
	return a
}

// rolesOf lists the roles p holds, in main, wal, shm order.
func rolesOf(p *holders.Process) []string {
	var out []string
	for _, r := range holders.Roles {
		if slices.ContainsFunc(p.Files, func(f holders.Held) bool { return f.Role == r }) {
			out = append(out, string(r))
		}
	}
	return out
}

// holderState is "current", or "ORPHAN (roles)" naming the orphan inodes.
func holderState(p *holders.Process) string {
	var orphan []string
	for _, r := range holders.Roles {
		if slices.ContainsFunc(p.Files, func(f holders.Held) bool { return f.Role == r && !f.Current }) {
			orphan = append(orphan, string(r))
		}
	}
	if len(orphan) == 0 {
		return "current"
	}
	return "ORPHAN (" + strings.Join(orphan, ",") + ")"
}

func userOf(p *holders.Process) string {
	if p.User != "" {
		return p.User
	}
	return fmt.Sprint(p.UID)
}

func commandOf(p *holders.Process) string {
	if len(p.Cmdline) > 0 {
		return strings.Join(p.Cmdline, " ")
	}
	if p.Exe != "" {
		return p.Exe
	}
	return "?"
}

func daemonLine(st control.Status) string {
	d := st.Daemon
	if !d.Running {
		line := "daemon not running"
		if d.Error != "" && d.Error != line {
			line = "daemon unreachable: " + d.Error
		}
		if d.Socket != "" {
			line += " (socket " + d.Socket + ")"
		}
		return line + "; the holders above are from a scan by agentctl itself"
	}
	line := fmt.Sprintf("daemon running, pid %d", d.PID)
	if !d.StartedAt.IsZero() {
		line += ", since " + stamp(d.StartedAt)
	}
	if d.Socket != "" {
		line += ", socket " + d.Socket
	}
	q := st.Queue
	return line + fmt.Sprintf("; replay queue: %d queued, %d running, %d failed, %d done", q.Queued, q.Running, q.Failed, q.Done)
}

// stamp formats a time for tables: UTC, to the second.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
