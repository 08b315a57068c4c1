package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/internal/version"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/service"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/supervisor"
)

// With log.level = "warn" the log leaves out the info events, but the
// alert command still receives them: a resolved incident reaches
// alert.exec as incident.resolved.
func TestAlertsIndependentOfLogLevel(t *testing.T) {
	db := hermestest.NewStore(t)
	home := filepath.Dir(db)
	script, out := hermestest.NewAlertRecorder(t)
	conf := filepath.Join(t.TempDir(), "agent.toml")
	toml := "[log]\nlevel = \"warn\"\nformat = \"json\"\n[alert]\nexec = [" + strconv.Quote(script) + "]\nrate_limit = \"0s\"\nconcurrency = 1\n"
	if err := os.WriteFile(conf, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := service.Load(conf, true)
	if err != nil {
		t.Fatal(err)
	}
	var logs hermestest.LogBuffer
	log, alerter := newLogging(service.LogOutput{Stderr: &logs}, cfg, nil)
	env := hermestest.NewAgentEnv(t, home)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := supervisor.Start(ctx, supervisor.Options{
		StateDir: env.StateDir, Socket: "-", Reconcile: 300 * time.Millisecond, Logger: log,
		Discover: store.DiscoverOptions{Getenv: env.Getenv, UserHome: "/nonexistent", CurrentUserOnly: true},
		Policies: incident.PolicySet{Grace: 5 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 200})
	w.AcksGrow(t, 5)
	hermestest.RestoreOver(t, db)
	hermestest.Eventually(t, "incident.resolved to reach the alert command", 60*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		return bytes.Contains(b, []byte(`"event":"`+incident.EventIncidentResolved+`"`))
	})
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelClose()
	if err := a.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if err := alerter.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	j, err := journal.OpenReadOnly(closeCtx, filepath.Join(env.StateDir, journal.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	incs, err := j.ListIncidents(closeCtx, journal.ListOptions{Store: db})
	if err != nil || len(incs) != 1 || incs[0].State != journal.StateResolved {
		t.Fatalf("incidents %+v (%v), want one resolved: its incident.resolved is an info record", incs, err)
	}

	alerted := map[string]bool{}
	for _, run := range hermestest.Runs(t, out) {
		doc, _, _ := strings.Cut(run, "env=")
		var d struct{ Event string }
		if err := json.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatalf("alert stdin %q: %v", doc, err)
		}
		alerted[d.Event] = true
	}
	if !alerted[incident.EventIncidentResolved] || !alerted[incident.EventIncidentOpened] {
		t.Errorf("alerted %v; want incident.opened and incident.resolved with log.level = warn", alerted)
	}
	for _, quiet := range supervisor.QuietEvents() {
		if alerted[quiet] {
			t.Errorf("quiet event %s was alerted", quiet)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var r struct{ Level, Event string }
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r.Level == "INFO" || r.Level == "DEBUG" {
			t.Errorf("log.level = warn logged %s", line)
		}
	}
}

// agentd refuses to run on an embedded SQLite without the WAL-reset fix,
// and says why.
func TestRequireSQLite(t *testing.T) {
	ctx := context.Background()
	if err := requireSQLite(ctx, version.SQLite); err != nil {
		t.Fatalf("this build's SQLite: %v", err)
	}
	old := func(context.Context) (string, error) { return "3.51.2", nil }
	err := requireSQLite(ctx, old)
	if !errors.Is(err, store.ErrSQLiteTooOld) || !strings.Contains(err.Error(), "3.51.2") ||
		!strings.Contains(err.Error(), store.MinSQLiteVersion) || !strings.Contains(err.Error(), "WAL-reset") {
		t.Fatalf("3.51.2: %v", err)
	}
	broken := func(context.Context) (string, error) { return "", errors.New("no driver") }
	if err := requireSQLite(ctx, broken); err == nil {
		t.Fatal("no version, no refusal")
	}
}
