package supervisor

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
)

func postJSON(t *testing.T, h http.Handler, path string, body any) *httptest.ResponseRecorder {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(b)))
	return rec
}

// The restore window: begin opens it for one pid, the worker then knows
// the store's changes are intended and the restorer is no orphan, a second
// restorer is refused, end closes it, and an unended window lapses.
func TestRestoreIntent(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	h := a.apiHandler()
	w := a.worker(db)
	if w == nil {
		t.Fatal("no worker for the store")
	}
	if w.intended() {
		t.Fatal("intended before any restore")
	}

	rec := postJSON(t, h, "/v1/restore/begin", control.RestoreBeginRequest{Store: db, PID: 4242, Mode: "online", Backup: "/b.db"})
	if rec.Code != http.StatusOK {
		t.Fatalf("begin: %d %s", rec.Code, rec.Body)
	}
	var in control.RestoreIntent
	if err := json.Unmarshal(rec.Body.Bytes(), &in); err != nil {
		t.Fatal(err)
	}
	if in.PID != 4242 || in.DaemonPID != os.Getpid() || time.Until(in.Until) < control.DefaultRestoreWindow-time.Minute {
		t.Fatalf("intent = %+v", in)
	}
	if !w.intended() || !w.restorer(holders.ProcRef{Pid: 4242}) || w.restorer(holders.ProcRef{Pid: 4243}) {
		t.Fatal("the worker does not see the window")
	}
	if !a.restoring(db) {
		t.Fatal("restoring() false during the window")
	}
	if rec := postJSON(t, h, "/v1/restore/begin", control.RestoreBeginRequest{Store: db, PID: 4243}); rec.Code != http.StatusConflict ||
		!strings.Contains(rec.Body.String(), "pid 4242") {
		t.Fatalf("second restorer: %d %s", rec.Code, rec.Body)
	}
	if rec := postJSON(t, h, "/v1/restore/end", control.RestoreEndRequest{Store: db, PID: 4243, Result: "done"}); rec.Code != http.StatusOK ||
		!strings.Contains(rec.Body.String(), `"ended": false`) || !w.intended() {
		t.Fatalf("end by another pid closed the window: %d %s", rec.Code, rec.Body)
	}
	if rec := postJSON(t, h, "/v1/restore/end", control.RestoreEndRequest{Store: db, PID: 4242, Result: "done"}); rec.Code != http.StatusOK ||
		!strings.Contains(rec.Body.String(), `"ended": true`) {
		t.Fatalf("end: %d %s", rec.Code, rec.Body)
	}
	// The restore's last change is often classified just after its end.
	if !w.intended() {
		t.Fatal("window closed at once by its end")
	}
	if _, ok := a.restoreIntent(db, time.Now().Add(restoreEndGrace+time.Second)); ok {
		t.Fatal("window still open after its end's grace")
	}
	if w.intended() || w.restorer(holders.ProcRef{Pid: 4242}) {
		t.Fatal("window still open after end")
	}

	// A window nobody ends lapses.
	if rec := postJSON(t, h, "/v1/restore/begin", control.RestoreBeginRequest{Store: db, PID: 7, Window: 30}); rec.Code != http.StatusOK {
		t.Fatalf("begin: %d %s", rec.Code, rec.Body)
	}
	if _, ok := a.restoreIntent(db, time.Now().Add(31*time.Second)); ok {
		t.Fatal("window open after it lapsed")
	}
	if w.intended() {
		t.Fatal("a lapsed window is still intended")
	}
	if n := a.intents.len(); n != 0 {
		t.Fatalf("%d windows outlived their end", n)
	}
}

func TestRestoreIntentRefusals(t *testing.T) {
	home, _ := testHome(t)
	a := startAgent(t, home, nil)
	h := a.apiHandler()
	cases := []struct {
		body any
		code int
		want string
	}{
		{control.RestoreBeginRequest{Store: "/elsewhere/state.db", PID: 1}, http.StatusNotFound, "not watched"},
		{control.RestoreBeginRequest{PID: 1}, http.StatusBadRequest, "needs store and pid"},
		{"not an object", http.StatusBadRequest, "decode"},
	}
	for _, tc := range cases {
		rec := postJSON(t, h, "/v1/restore/begin", tc.body)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%v: %d %s, want %d %q", tc.body, rec.Code, rec.Body, tc.code, tc.want)
		}
	}
}
