package incident

import (
	"path/filepath"

	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
)

// hermesLines lists the lines of Hermes' own session files queued for
// replay with li (followHermesDiverts' jobs, from the journal, so a
// restarted agent sees the same), for the divert to count as present
// (recovery.DivertRequest.HermesLines): a row Hermes diverted that is
// in the orphan too is then replayed from Hermes' file only. The lines
// appended so far are queued first: an incident can reach its divert
// within the step run that opened it, before any Advance followed them.
func (e *Engine) hermesLines(li *live) []recovery.HermesLines {
	e.followHermesDiverts(li)
	ctx, cancel := e.journalCtx()
	defer cancel()
	jobs, err := e.d.Journal.ListJobs(ctx, journal.JobFilter{IncidentID: li.id})
	if err != nil {
		e.log.Warn("could not list the incident's replays of Hermes' diverts; the divert does not count them", "incident", li.id, "err", err)
		return nil
	}
	from := map[string]int{}
	var order []string
	for _, j := range jobs {
		if filepath.Dir(j.Path) != e.sessionsDir() {
			continue // the incident's own divert, under sessions/recovered/
		}
		line := max(j.FromLine, 1)
		if old, ok := from[j.Path]; !ok {
			order = append(order, j.Path)
			from[j.Path] = line
		} else if line < old {
			from[j.Path] = line
		}
	}
	out := make([]recovery.HermesLines, 0, len(order))
	for _, p := range order {
		out = append(out, recovery.HermesLines{Path: p, FromLine: from[p]})
	}
	return out
}
