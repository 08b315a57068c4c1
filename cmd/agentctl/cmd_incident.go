package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/journal"
)

func incidentUsage(w io.Writer, fs *flag.FlagSet) {
	printUsage(w, fs, `usage: agentctl incident show ID [--json] [--socket PATH] [--state-dir DIR]

Shows an incident, its holders and every step the agent journaled. When agentd
does not run, reads its journal read-only and says so.
`, "")
}

func runIncident(ctx context.Context, e *env, args []string) int {
	v := newVerb(e, "incident", incidentUsage)
	var df daemonFlags
	df.register(v.fs)
	asJSON := v.fs.Bool("json", false, "print {incident, steps} as JSON (the control API's shape)")
	if len(args) > 0 && args[0] != "show" && !strings.HasPrefix(args[0], "-") {
		return v.usageError(fmt.Sprintf("unknown subcommand %q (want show)", args[0]))
	}
	if len(args) > 0 && args[0] == "show" {
		args = args[1:]
	} else if !slices.Contains(args, "-h") && !slices.Contains(args, "--help") {
		return v.usageError("missing subcommand show")
	}
	pos, code, ok := v.parseN(args, 1)
	if !ok {
		return code
	}
	id := pos[0]
	var view control.IncidentView
	from, err := askOrJournal(ctx, e, &df, "/v1/incidents/"+url.PathEscape(id), &view, func(j *journal.Journal) (err error) {
		view.Incident, err = j.GetIncident(ctx, id)
		if err == nil {
			view.Steps, err = j.Steps(ctx, id)
		}
		if errors.Is(err, journal.ErrIncidentNotFound) {
			err = fmt.Errorf("no incident %s in %s (hint: agentctl incidents --all lists them)", id, j.Path())
		}
		return err
	})
	if err != nil {
		return v.fail(err)
	}
	if view.Steps == nil {
		view.Steps = []journal.Step{}
	}
	return v.answer(from, *asJSON, view, func(w io.Writer) { printIncident(w, view) })
}

func printIncident(w io.Writer, v control.IncidentView) {
	in := v.Incident
	d := in.Detail
	fmt.Fprintf(w, "Incident %s\n", in.ID)
	kv := newTable("  ")
	kv.row("kind", string(in.Kind))
	state := string(in.State)
	if in.PrevState != "" {
		state += " (was " + string(in.PrevState) + ")"
	}
	kv.row("state", state)
	kv.row("policy", in.Policy)
	kv.row("store", fmt.Sprintf("%s (profile %s, home %s)", in.Store, orDash(in.Profile), in.Home))
	kv.row("opened", stamp(in.OpenedAt))
	kv.row("updated", stamp(in.UpdatedAt))
	if !in.ResolvedAt.IsZero() {
		kv.row("ended", stamp(in.ResolvedAt))
	}
	if !d.ReplacedAt.IsZero() {
		kv.row("replaced at", stamp(d.ReplacedAt))
	}
	if d.OldGeneration != nil {
		kv.row("old generation", generationRecordText(d.OldGeneration))
	}
	if d.NewGeneration != nil {
		kv.row("new generation", generationRecordText(d.NewGeneration))
	}
	if d.CapturePath != "" {
		kv.row("capture", fmt.Sprintf("%s (%d bytes)", d.CapturePath, d.CaptureBytes))
	}
	for _, q := range d.Quarantined {
		kv.row("quarantined", q)
	}
	if d.DivertDir != "" {
		kv.row("divert dir", d.DivertDir)
	}
	if d.Error != "" {
		kv.row("error", d.Error)
	}
	kv.write(w)
	if len(d.Holders) > 0 {
		fmt.Fprintln(w, "  holders:")
		t := newTable("    ", "PID", "FILES", "FROZEN", "RELEASED", "EXE")
		for _, h := range d.Holders {
			var files []string
			for _, f := range h.Files {
				how := fmt.Sprintf("fd %d", f.FD)
				if f.FD < 0 || f.Mmap {
					how = "mmap"
				}
				files = append(files, fmt.Sprintf("%s(%s)", f.Role, how))
			}
			frozen := "no"
			if h.Frozen {
				frozen = "yes"
			}
			t.row(fmt.Sprint(h.PID), strings.Join(files, ","), frozen, orDash(h.Released), h.Exe)
		}
		t.write(w)
	}
	fmt.Fprintln(w, "  steps:")
	if len(v.Steps) == 0 {
		fmt.Fprintln(w, "    (none)")
		return
	}
	t := newTable("    ", "SEQ", "AT", "STEP", "STATE", "DETAIL")
	for _, s := range v.Steps {
		tr := ""
		if s.To != "" {
			tr = "→ " + string(s.To)
		}
		t.row(fmt.Sprint(s.Seq), stampMilli(s.At), s.Name, tr, detailText(s.Detail))
	}
	t.write(w)
}

func generationRecordText(g *journal.GenerationRecord) string {
	file := func(role string, f journal.FileRecord) string {
		if f.Ino == 0 {
			return role + " absent"
		}
		return fmt.Sprintf("%s ino %d", role, f.Ino)
	}
	wal := file("wal", g.WAL)
	if g.Salt1 != 0 || g.Salt2 != 0 {
		wal += fmt.Sprintf(" salts %08x:%08x", g.Salt1, g.Salt2)
	}
	return file("main", g.Main) + " · " + wal + " · " + file("shm", g.SHM)
}

// detailText renders a step's detail as sorted key=value pairs; values
// that are not plain strings are shown as JSON.
func detailText(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		var val string
		switch x := m[k].(type) {
		case string:
			val = x
			if val == "" || strings.ContainsAny(val, " \t\"") {
				val = fmt.Sprintf("%q", val)
			}
		default:
			b, err := json.Marshal(x)
			if err != nil {
				val = fmt.Sprint(x)
			} else {
				val = string(b)
			}
		}
		parts = append(parts, k+"="+val)
	}
	return strings.Join(parts, " ")
}

// stampMilli is stamp with milliseconds, for steps that follow each other
// within one second.
func stampMilli(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}
