//go:build linux

package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stateguard/stateguard/journal"
)

// ringLog keeps the agent's last log lines in memory, so a benchmark that
// cannot afford to log every trial to tb can still say what the agent did
// before a trial went wrong.
type ringLog struct {
	mu    sync.Mutex
	lines []string
	next  int
	buf   bytes.Buffer
	h     slog.Handler
}

func newRingLog(n int, level slog.Level) (*ringLog, *slog.Logger) {
	r := &ringLog{lines: make([]string, 0, n)}
	r.h = slog.NewTextHandler(&r.buf, &slog.HandlerOptions{Level: level})
	return r, slog.New(ringHandler{r: r, h: r.h})
}

// add is called with r.mu held, after the handler wrote one record into
// r.buf.
func (r *ringLog) add() {
	l := strings.TrimRight(r.buf.String(), "\n")
	r.buf.Reset()
	if len(r.lines) < cap(r.lines) {
		r.lines = append(r.lines, l)
		return
	}
	r.lines[r.next] = l
	r.next = (r.next + 1) % len(r.lines)
}

// Lines returns the kept lines, oldest first.
func (r *ringLog) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(append([]string(nil), r.lines[r.next:]...), r.lines[:r.next]...)
}

type ringHandler struct {
	r *ringLog
	h slog.Handler
}

func (h ringHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h ringHandler) Handle(ctx context.Context, rec slog.Record) error {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	err := h.h.Handle(ctx, rec)
	h.r.add()
	return err
}

func (h ringHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return ringHandler{r: h.r, h: h.h.WithAttrs(as)}
}

func (h ringHandler) WithGroup(name string) slog.Handler {
	return ringHandler{r: h.r, h: h.h.WithGroup(name)}
}

// waitIncidentsEnd waits until the agent has no unfinished incident, and
// otherwise fails tb naming each one still open: its kind, state, last
// error, and its steps with their times, whether db is whole, then the
// agent's last log lines.
func waitIncidentsEnd(tb testing.TB, a *Agent, db string, d time.Duration, log *ringLog) {
	tb.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(d)
	for {
		incs, err := a.journal.ListIncidents(ctx, journal.ListOptions{OpenOnly: true})
		if err == nil && len(incs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			fmt.Fprintf(&b, "%d incident(s) still open after %v (list err %v):\n", len(incs), d, err)
			for _, inc := range incs {
				fmt.Fprintf(&b, "  %s kind=%s state=%s prev=%s opened=%s error=%q\n",
					inc.ID, inc.Kind, inc.State, inc.PrevState, inc.OpenedAt.Format(time.RFC3339Nano), inc.Detail.Error)
				steps, _ := a.journal.Steps(ctx, inc.ID)
				for _, s := range steps {
					fmt.Fprintf(&b, "    %s %s %s->%s %v\n", s.At.Format("15:04:05.000000"), s.Name, s.From, s.To, s.Detail)
				}
			}
			fmt.Fprintf(&b, "store %s whole: %v\n", db, storeWhole(db))
			if log != nil {
				b.WriteString("agent log, last lines:\n")
				for _, l := range log.Lines() {
					b.WriteString("  " + l + "\n")
				}
			}
			tb.Fatal(b.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
