package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/recovery"
	"github.com/stateguard/stateguard/store"
)

// Hermes diverts the rows it refuses to write (a replaced store, a lost WAL
// generation) to <profile>/sessions/<session>.jsonl. agentd replays the
// lines it appends while an incident is open; the rest (a divert while
// agentd was not running, or outside any incident it saw) waits for an
// operator. status and doctor show every such file holding records the
// store lacks, by the replay's own skip rule (recovery.Inspect: the same
// recovery ids as `hermes sessions import --from diverted`), read-only.

// maxDivertFiles bounds how many session files are inspected per store,
// newest first: each is one read-only look at the store.
const maxDivertFiles = 100

// hermesDiverts lists s's session JSONL files with records s lacks.
func hermesDiverts(ctx context.Context, s store.Store) []control.HermesDivert {
	if s.Kind != store.Hermes {
		return nil
	}
	dir := filepath.Join(s.Dir(), "sessions")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	type file struct {
		path string
		mod  int64
	}
	var files []file
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".jsonl") {
			continue // a symlink is not Hermes' file; recovered/ is agentd's own trail
		}
		if fi, err := e.Info(); err == nil {
			files = append(files, file{filepath.Join(dir, e.Name()), fi.ModTime().UnixNano()})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod > files[j].mod })
	var out []control.HermesDivert
	for i, f := range files {
		if i == maxDivertFiles || ctx.Err() != nil {
			break
		}
		rep, err := recovery.Inspect(ctx, f.path, s.Path, recovery.ReplayOptions{})
		if err != nil || rep.WouldAppend <= 0 {
			continue
		}
		out = append(out, control.HermesDivert{Path: rep.Path, Records: rep.Records, Waiting: rep.WouldAppend})
	}
	return out
}

// addHermesDiverts fills every Hermes store's HermesDiverts in st.
func addHermesDiverts(ctx context.Context, st *control.Status) {
	for i, ss := range st.Stores {
		if ss.Kind == store.Hermes.String() {
			st.Stores[i].HermesDiverts = hermesDiverts(ctx, store.Store{Path: ss.Path, Kind: store.Hermes})
		}
	}
}

func divertsText(ds []control.HermesDivert) string {
	n := 0
	for _, d := range ds {
		n += d.Waiting
	}
	return fmt.Sprintf("%d record(s) in %d file(s) of sessions/ not in the store (agentctl doctor lists them)", n, len(ds))
}

// checkHermesDiverts is doctor's view of the same.
func checkHermesDiverts(ctx context.Context, stores []store.Store) checkResult {
	r := checkResult{Name: "Hermes diverts"}
	for _, s := range stores {
		for _, d := range hermesDiverts(ctx, s) {
			r.Details = append(r.Details, fmt.Sprintf("waiting: %d of %d records of %s are not in %s", d.Waiting, d.Records, d.Path, s.Path))
		}
	}
	if len(r.Details) == 0 {
		r.Status, r.Summary = statusOK, "no row Hermes diverted is missing from its store"
		return r
	}
	r.Status = statusWarn
	r.Summary = fmt.Sprintf("%d file(s) Hermes diverted rows to hold rows their store lacks", len(r.Details))
	r.Fix = "agentd replays what Hermes diverts during an incident; for these run `agentctl replay PATH` (idempotent, the same recovery ids as `hermes sessions import --from diverted`, so running both adds each row once)"
	return r
}
