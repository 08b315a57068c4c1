package incident

import (
	"context"
	"log/slog"
	"time"

	"github.com/stateguard/stateguard/journal"
)

// journalTimeout bounds one journal write. Journal writes do not use the
// engine's context: a step that was done when the agent began to stop
// must still be recorded, or the journal would say it never happened.
const journalTimeout = 30 * time.Second

// journalCtx bounds a journal write without the engine's cancellation.
func (e *Engine) journalCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(e.ctx), journalTimeout)
}

// enter journals step, with what update records of the step (capture
// path, holders released, ...) and the state to, in one transaction, and
// only once that is committed moves li to to and the incidents gauge.
// Every change of an incident's state goes through it. It reports whether
// li moved. A journal write that fails leaves li where the journal says it
// is: the step runs again at the next wake (steps are idempotent), so the
// engine never acts on a state a restarted agent would not find.
func (e *Engine) enter(li *live, to journal.State, step journal.Step, update func(*journal.Incident)) bool {
	from := li.state
	if to != from && !e.allowed(from, to) {
		e.log.Error("bug: a step moved an incident along a transition the state table does not have; refused",
			"incident", li.id, "from", string(from), "to", string(to), "step", step.Name)
		return false
	}
	if e.write(li, from, to, step, update) != nil {
		return false
	}
	if to != from {
		e.d.Metrics.IncidentState(string(li.kind), string(from), -1)
		e.d.Metrics.IncidentState(string(li.kind), string(to), 1)
		li.prev, li.state = from, to
	}
	return true
}

// record journals a step that leaves the state as it is (a snapshot, a
// note, a capture taken before release) and reports whether it was
// committed.
func (e *Engine) record(li *live, step journal.Step, update func(*journal.Incident)) bool {
	return e.write(li, li.state, li.state, step, update) == nil
}

// write journals step and the table's decision for state to: the state
// and whether it lets the store's replay jobs run (the journal's replay
// gate reads that, never a list of states of its own).
func (e *Engine) write(li *live, from, to journal.State, step journal.Step, update func(*journal.Incident)) error {
	if h := e.d.Hooks.BeforeJournal; h != nil {
		h(li.id, from, to, step.Name)
	}
	ctx, cancel := e.journalCtx()
	defer cancel()
	_, err := e.d.Journal.UpdateIncident(ctx, li.id, step, func(inc *journal.Incident) error {
		if update != nil {
			update(inc)
		}
		li.toRecord(&inc.Detail)
		inc.State, inc.LetsReplay = to, e.table[to].letsReplay
		return nil
	})
	if err != nil {
		e.log.Error("journal step failed; the incident stays where the journal says and the step is retried at the next wake",
			"incident", li.id, "step", step.Name, "from", string(from), "to", string(to), "err", err,
			"hint", "check the state directory's disk and permissions (agentctl doctor)")
	}
	return err
}

// needsAction moves the incident to needs_action with the reason an
// operator reads in `agentctl incident show`.
func (e *Engine) needsAction(li *live, msg string) {
	if li.state == needsAction {
		return
	}
	li.needsSince = e.d.Now()
	e.enter(li, needsAction, journal.Step{Name: journal.StepNeedsAction, Detail: map[string]any{"error": msg}},
		func(inc *journal.Incident) { inc.Detail.Error, inc.Detail.NeedsActionAt = msg, li.needsSince })
}

// note journals a problem that does not change the state.
func (e *Engine) note(li *live, msg string) {
	e.record(li, journal.Step{Name: journal.StepNote, Detail: map[string]any{"error": msg}},
		func(inc *journal.Incident) { inc.Detail.Error = msg })
}

// finish ends an incident in a terminal state, closes its pins and
// forgets it. update, when given, records more of the ending.
func (e *Engine) finish(li *live, to journal.State, step journal.Step, update ...func(*journal.Incident)) {
	msg, hasMsg := step.Detail["error"].(string)
	if !e.enter(li, to, step, func(inc *journal.Incident) {
		if hasMsg && to == failed {
			inc.Detail.Error = msg
		}
		for _, u := range update {
			u(inc)
		}
	}) {
		return // refused (a bug) or not journaled: logged by enter
	}
	e.unpin(li)
	if li.snapshot != "" {
		_ = e.st.RemoveFile(li.snapshot) // through the directory's handle, never by name
	}
	e.forget(li)
	switch to {
	case failed:
		e.emit(slog.LevelError, "incident failed", EventIncidentResolved, li, "state", string(to), "reason", step.Detail["error"])
	case unrecoverable:
		e.emit(slog.LevelError, "incident ended unrecoverable", EventIncidentResolved, li, "state", string(to), "reason", step.Detail["error"])
	default:
		e.emit(slog.LevelInfo, "incident resolved", EventIncidentResolved, li, "state", string(to),
			"took_ms", e.d.Now().Sub(li.openedAt).Milliseconds())
	}
}

// emit logs one record of a protocol step with its stable event name (the
// alert path picks it up from there).
func (e *Engine) emit(level slog.Level, msg, event string, li *live, attrs ...any) {
	args := append([]any{"event", event, "incident", li.id}, attrs...)
	e.log.Log(context.Background(), level, msg, args...)
}

func failStep(msg string) journal.Step {
	return journal.Step{Name: journal.StepFailed, Detail: map[string]any{"error": msg}}
}
