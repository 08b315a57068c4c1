package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stateguard/stateguard/supervisor"
)

var metricName = regexp.MustCompile(`\bstateguard_[a-z_]+[a-z]\b`)

// histogram and summary series carry a suffix the registry does not.
var seriesSuffix = regexp.MustCompile(`_(bucket|sum|count)$`)

// registered reports whether agentd's registry has a metric called name.
// The registry lists no descriptors, but refuses a second collector with
// a name it has already, whatever its labels: that refusal is the answer.
func registered(t *testing.T, reg *prometheus.Registry, name string) bool {
	t.Helper()
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe from deploy's test"})
	if err := reg.Register(probe); err != nil {
		return true
	}
	reg.Unregister(probe)
	return false
}

func namesIn(t *testing.T, text string) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, m := range metricName.FindAllString(text, -1) {
		name := m
		if !strings.HasSuffix(m, "_total") {
			name = seriesSuffix.ReplaceAllString(m, "")
		}
		seen[name] = true
	}
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TestRulesAndDashboardNameRealMetrics: a metric renamed or moved in
// agentd without the rules following would leave an alert that never
// fires; this is where that shows.
func TestRulesAndDashboardNameRealMetrics(t *testing.T) {
	reg := supervisor.NewMetrics().Registry()
	for _, file := range []string{"prometheus/stateguard.rules.yml", "grafana/stateguard.json"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		names := namesIn(t, string(b))
		if len(names) == 0 {
			t.Fatalf("%s names no stateguard metric", file)
		}
		for _, name := range names {
			if !registered(t, reg, name) {
				t.Errorf("%s uses %s, which agentd does not export", file, name)
			}
		}
	}
}

// TestDashboardShape: the dashboard imports into Grafana as it is (valid
// JSON, unique panel ids, every query on the data source variable).
func TestDashboardShape(t *testing.T) {
	b, err := os.ReadFile("grafana/stateguard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana/stateguard.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q title %q: both are needed for a stable import", d.UID, d.Title)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"datasource", "job", "instance"} {
		if !vars[v] {
			t.Errorf("no $%s variable", v)
		}
	}
	ids := map[int]string{}
	queries := 0
	for _, p := range d.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the ${datasource} variable", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
			if strings.Contains(q.Expr, "stateguard_") && !strings.Contains(q.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q ignores the instance selector: %s", p.Title, q.Expr)
			}
		}
	}
	if queries == 0 {
		t.Error("the dashboard has no queries")
	}
}
