package journal

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
)

// StepRun is a step of an incident under way: its state and how many
// agents have started it without one coming back from it. An agent that
// dies inside a step (a crash, the service manager's watchdog) leaves it
// behind, and the next agent counts on; a step that took two agents with
// it is parked instead of run a third time (incident/park.go).
type StepRun struct {
	State  State `json:"state"`
	Starts int   `json:"starts"`
}

// SetStepRun records run (nil: no step under way) in the incident's
// detail. It adds no step to the incident's history: it is bookkeeping
// around steps, written before and after each one.
func (j *Journal) SetStepRun(ctx context.Context, id string, run *StepRun) error {
	err := j.write(ctx, func(tx *sql.Tx) error {
		inc, err := getIncident(ctx, tx, id)
		if err != nil {
			return err
		}
		inc.Detail.StepRun = run
		detail, err := json.Marshal(inc.Detail)
		if err != nil {
			return fmt.Errorf("encode detail: %w", err)
		}
		_, err = tx.ExecContext(ctx, `UPDATE incidents SET detail = ? WHERE id = ?`, string(detail), id)
		return err
	})
	if err != nil {
		return fmt.Errorf("journal %s: incident %s: record the step under way: %w", j.path, id, err)
	}
	return nil
}
