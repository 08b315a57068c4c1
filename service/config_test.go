package service

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/incident"
)

func TestExampleConfigParses(t *testing.T) {
	cfg, err := Load(filepath.Join("testdata", "config", "example", "agent.toml"), true)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Reconcile.D != 10*time.Second || cfg.Policy.Replaced != PolicyTerminate || cfg.Policy.Grace.D != 30*time.Second {
		t.Fatalf("policy/reconcile: %+v", cfg)
	}
	if cfg.Capture.MaxBytes != 2<<30 || cfg.Metrics.Listen != "127.0.0.1:9477" || len(cfg.Alert.Exec) != 3 {
		t.Fatalf("capture/metrics/alert: %+v", cfg)
	}
	if len(cfg.Stores) != 2 || cfg.Stores[0].Kind != KindGeneric || *cfg.Stores[0].Guard {
		t.Fatalf("stores: %+v", cfg.Stores)
	}
	if cfg.Verdict != holders.RuleLocks {
		t.Fatalf("verdict %q", cfg.Verdict)
	}
	ops := cfg.Stores[1]
	if ops.Policy.Replaced != PolicyHold || ops.Policy.SidecarLost != PolicyKill || ops.Kind != KindAuto {
		t.Fatalf("per-store policy must override one kind and inherit the rest: %+v", ops.Policy)
	}
}

func TestMissingDefaultFileMeansDefaults(t *testing.T) {
	cfg, err := Load(filepath.Join(t.TempDir(), "none.toml"), false)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Reconcile.D != DefaultReconcile || !*cfg.Guard || cfg.Policy.SidecarLost != PolicyKill ||
		cfg.Stall.Timeout.D != DefaultStallTimeout || cfg.Metrics.Listen != "" || cfg.Verdict != holders.RuleLocks {
		t.Fatalf("defaults: %+v", cfg)
	}
}

func TestMissingExplicitFileIsAnError(t *testing.T) {
	p := filepath.Join(t.TempDir(), "none.toml")
	_, err := Load(p, true)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("want an error naming %s, got %v", p, err)
	}
}

func TestVerdictRule(t *testing.T) {
	cfg, err := Parse([]byte("verdict = \"strict\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Verdict != holders.RuleStrict {
		t.Fatalf("verdict %q", cfg.Verdict)
	}
}

func TestStallZeroDisables(t *testing.T) {
	cfg, err := Parse([]byte("[stall]\ntimeout = \"0s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Stall.Timeout.D != 0 {
		t.Fatalf("explicit 0s must stay 0, got %v", cfg.Stall.Timeout.D)
	}
}

// Every invalid document names the key and the line it is on.
func TestInvalidConfigNamesKeyAndLine(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"unknown key", "guard = true\n\nreconcil = \"5s\"\n", "line 3: unknown key reconcil"},
		{"unknown nested key", "[policy]\nreplaced = \"kill\"\nfrobnicate = 1\n", "line 3: unknown key policy.frobnicate"},
		{"bad policy", "[policy]\n\nreplaced = \"nuke\"\n", "line 3: key policy.replaced"},
		{"bad duration", "reconcile = \"ten seconds\"\n", "line 1: key reconcile"},
		{"reconcile too small", "\nreconcile = \"1ms\"\n", "line 2: key reconcile"},
		{"metrics not loopback", "[metrics]\nlisten = \"0.0.0.0:9477\"\n", "line 2: key metrics.listen"},
		{"relative home", "homes = [\"rel/path\"]\n", "line 1: key homes"},
		{"store path twice", "[[store]]\npath = \"/a.db\"\n[[store]]\npath = \"/a.db\"\n", "key store.path"},
		{"syntax", "guard = \n", "line 1"},
		{"bad size", "[capture]\nmax_bytes = \"lots\"\n", "line 2: key capture.max_bytes"},
		{"wrong type", "guard = \"yes\"\n", "line 1"},
		{"bad verdict rule", "guard = true\nverdict = \"lenient\"\n", "line 2: key verdict"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			if err == nil {
				t.Fatal("parsed an invalid config")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

func TestDefaultConfigPath(t *testing.T) {
	env := map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/home/u"}
	get := func(k string) string { return env[k] }
	if p := DefaultConfigPath(get, 0); p != SystemConfigPath {
		t.Fatal(p)
	}
	if p := DefaultConfigPath(get, 1000); p != "/x/stateguard/agent.toml" {
		t.Fatal(p)
	}
	delete(env, "XDG_CONFIG_HOME")
	if p := DefaultConfigPath(get, 1000); p != "/home/u/.config/stateguard/agent.toml" {
		t.Fatal(p)
	}
}

func TestLoadRejectsUnreadableDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "agent.toml"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(filepath.Join(dir, "agent.toml"), false); err == nil {
		t.Fatal("a directory in place of the config file must be an error")
	}
}

func TestPolicyFor(t *testing.T) {
	cfg, err := Parse([]byte("[policy]\nreplaced = \"hold\"\ngrace = \"5s\"\n[[store]]\npath = \"/s/state.db\"\npolicy.replaced = \"kill\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.PolicyFor("/s/state.db"); p.Replaced != PolicyKill || p.Grace != 5*time.Second || p.SidecarLost != PolicyKill {
		t.Errorf("store entry: %+v", p)
	}
	if p := cfg.PolicyFor("/other/state.db"); p.Replaced != PolicyHold || p.Grace != 5*time.Second {
		t.Errorf("[policy]: %+v", p)
	}
	def, _ := Parse(nil)
	if p := def.PolicyFor("/x"); p != incident.DefaultPolicies() {
		t.Errorf("defaults: %+v, want %+v", p, incident.DefaultPolicies())
	}
}
