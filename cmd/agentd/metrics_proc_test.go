package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// deployedMetric finds the metric names in the alert rules and the
// dashboard; histogram series carry a suffix the family does not.
var (
	deployedMetric = regexp.MustCompile(`\bstateguard_[a-z_]+[a-z]\b`)
	seriesSuffix   = regexp.MustCompile(`_(bucket|sum|count)$`)
)

func deployedMetrics(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, f := range []string{"prometheus/stateguard.rules.yml", "grafana/stateguard.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range deployedMetric.FindAllString(string(b), -1) {
			if !strings.HasSuffix(m, "_total") {
				m = seriesSuffix.ReplaceAllString(m, "")
			}
			seen[m] = true
		}
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TestScrapeHasEveryDeployedMetric: a running agentd, before any incident,
// exports every metric deploy/'s alert rules and dashboard use (a labelled
// one with its series at 0, so increase() and absent() behave), with the
// build_info and reconcile interval it runs with, and the scrape passes
// promtool check metrics.
func TestScrapeHasEveryDeployedMetric(t *testing.T) {
	rig := newAgentdRig(t, "[metrics]\nlisten = \"127.0.0.1:0\"\n")
	if err := hermestest.CreateStore(filepath.Join(rig.home, "state.db")); err != nil {
		t.Fatal(err)
	}
	p := rig.start(t)
	defer p.stop(t)
	line := p.waitLog(t, 60*time.Second, `"msg":"serving metrics"`)
	var rec struct{ Addr string }
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Addr == "" {
		t.Fatalf("serving metrics line without an address: %q (%v)", line, err)
	}
	resp, err := http.Get("http://" + rec.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("the scrape does not parse: %v", err)
	}
	names := deployedMetrics(t)
	if len(names) < 10 {
		t.Fatalf("only %d metric names found in deploy/: %v", len(names), names)
	}
	for _, n := range names {
		if f := fams[n]; f == nil || len(f.GetMetric()) == 0 {
			t.Errorf("deploy/ uses %s; the running agent's scrape has no series of it", n)
		}
	}
	for _, want := range []string{
		`stateguard_incidents_finished_total{kind="replaced",state="unrecoverable"} 0`,
		`stateguard_incidents_opened_total{kind="sidecar_lost"} 0`,
		`stateguard_guard_stores{state="idle"}`,
		`stateguard_reconcile_interval_seconds 0.2`,
	} {
		if !bytes.Contains(body, []byte(want+"\n")) && !bytes.Contains(body, []byte(want+" ")) {
			t.Errorf("the scrape has no line %q", want)
		}
	}
	bi := fams["stateguard_build_info"]
	if bi == nil || len(bi.GetMetric()) != 1 || bi.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Errorf("stateguard_build_info is not one series at 1: %v", bi)
	} else {
		for _, l := range bi.GetMetric()[0].GetLabel() {
			if l.GetValue() == "" || l.GetValue() == "unknown" && l.GetName() == "sqlite" {
				t.Errorf("build_info label %s=%q", l.GetName(), l.GetValue())
			}
		}
	}
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Skip("promtool is not installed (Debian: prometheus); the names were checked")
	}
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
