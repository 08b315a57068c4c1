package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// An operator's replay queued over the socket runs on the daemon, once.
func TestEnqueueReplayOverSocket(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	jsonl := filepath.Join(t.TempDir(), "sess-op.jsonl")
	lines := `{"role": "user", "content": "queued one", "timestamp": 1732912345.5}
{"role": "assistant", "content": "queued two", "timestamp": 1732912346.5}
`
	if err := os.WriteFile(jsonl, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.SocketPath())
	}}}
	post := func(body any) (int, journal.Job) {
		b, _ := json.Marshal(body)
		resp, err := c.Post("http://agent/v1/jobs", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var j journal.Job
		json.NewDecoder(resp.Body).Decode(&j)
		return resp.StatusCode, j
	}
	if code, _ := post(control.JobRequest{Path: jsonl, Store: "/not/watched/state.db"}); code != http.StatusNotFound {
		t.Fatalf("unwatched store: HTTP %d, want 404", code)
	}
	for range 2 { // the second run must find both rows present
		code, job := post(control.JobRequest{Path: jsonl, Store: db})
		if code != http.StatusAccepted {
			t.Fatalf("enqueue: HTTP %d", code)
		}
		hermestest.Eventually(t, "the job to finish", 20*time.Second, func() bool {
			j, err := a.journal.GetJob(context.Background(), job.ID)
			return err == nil && (j.State == journal.JobDone || j.State == journal.JobFailed)
		})
		if j, _ := a.journal.GetJob(context.Background(), job.ID); j.State != journal.JobDone {
			t.Fatalf("job %d ended %s: %s", j.ID, j.State, j.LastError)
		}
	}
	rows := dbRows(t, db)
	if rows["queued one"] != 1 || rows["queued two"] != 1 {
		t.Fatalf("rows after two replays: %v", rows)
	}
}

// A job's JSONL is resolved once, at the enqueue: the job names the file
// a symlink pointed to then, and a FIFO (which would block a reader) or a
// missing file is refused with 400 before anything is queued.
func TestEnqueueResolvesThePathOnce(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(dir, "sess-real.jsonl")
	if err := os.WriteFile(real, []byte(`{"role": "user", "content": "x", "timestamp": 1}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "sess-link.jsonl")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "sess-fifo.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.SocketPath())
	}}}
	post := func(path string) (int, journal.Job) {
		b, _ := json.Marshal(control.JobRequest{Path: path, Store: db, SessionID: "s"})
		resp, err := c.Post("http://agent/v1/jobs", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var j journal.Job
		json.NewDecoder(resp.Body).Decode(&j)
		return resp.StatusCode, j
	}
	for _, p := range []string{fifo, filepath.Join(dir, "missing.jsonl")} {
		if code, _ := post(p); code != http.StatusBadRequest {
			t.Errorf("enqueue %s: HTTP %d, want 400", p, code)
		}
	}
	code, job := post(link)
	if code != http.StatusAccepted || job.Path != real {
		t.Fatalf("enqueue through a symlink: HTTP %d, job path %q, want 202 and %s", code, job.Path, real)
	}
}
