package service

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// FuzzParseConfig: Parse never panics; every error starts with the line it
// is about (a real line of the document); every config it accepts holds the
// invariants agentd relies on, and survives a round trip through the TOML
// encoder unchanged. Seeds: the example config, the documents of
// TestInvalidConfigNamesKeyAndLine, and testdata/fuzz/FuzzParseConfig/.
func FuzzParseConfig(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("testdata", "config", "example", "agent.toml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	for _, doc := range []string{
		"guard = true\n\nreconcil = \"5s\"\n",
		"[policy]\nreplaced = \"kill\"\nfrobnicate = 1\n",
		"[policy]\n\nreplaced = \"nuke\"\n",
		"reconcile = \"ten seconds\"\n",
		"[metrics]\nlisten = \"0.0.0.0:9477\"\n",
		"homes = [\"rel/path\"]\n",
		"[[store]]\npath = \"/a.db\"\n[[store]]\npath = \"/a.db\"\n",
		"guard = \n",
		"[capture]\nmax_bytes = \"lots\"\n",
		"guard = \"yes\"\n",
		"[stall]\ntimeout = \"0s\"\n",
		"policy = {replaced = \"hold\", grace = \"1s\"}\nalert.exec = [\"/bin/true\"]\n",
		"[[store]]\npath = \"/s.db\"\npolicy.mispaired = \"observe\"\n",
		"store = [{path = \"/x.db\", kind = \"hermes\"}]\n",
	} {
		f.Add([]byte(doc))
	}
	lineRe := regexp.MustCompile(`^line (\d+): \S`)
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			m := lineRe.FindStringSubmatch(err.Error())
			if m == nil {
				t.Fatalf("error does not start with its line: %q", err)
			}
			n, _ := strconv.Atoi(m[1])
			if lines := bytes.Count(data, []byte("\n")) + 1; n < 1 || n > lines {
				t.Fatalf("error names line %d of a %d-line document: %q", n, lines, err)
			}
			return
		}
		checkConfigInvariants(t, cfg)

		var enc bytes.Buffer
		if err := toml.NewEncoder(&enc).Encode(cfg); err != nil {
			t.Fatalf("encode a parsed config: %v", err)
		}
		again, err := Parse(enc.Bytes())
		if err != nil {
			t.Fatalf("the encoded config does not parse: %v\n%s", err, enc.Bytes())
		}
		var enc2 bytes.Buffer
		if err := toml.NewEncoder(&enc2).Encode(again); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc.Bytes(), enc2.Bytes()) {
			t.Fatalf("round trip changed the config:\n%s\n---\n%s", enc.Bytes(), enc2.Bytes())
		}
	})
}

// checkConfigInvariants restates, independently of validate, what a config
// that Parse accepted must satisfy after defaults.
func checkConfigInvariants(t *testing.T, c *Config) {
	t.Helper()
	abs := func(what, p string) {
		if !strings.HasPrefix(p, "/") {
			t.Fatalf("%s %q is not absolute", what, p)
		}
	}
	if c.StateDir != "" {
		abs("state_dir", c.StateDir)
	}
	if c.Socket != "" {
		abs("socket", c.Socket)
	}
	for _, h := range c.Homes {
		abs("home", h)
	}
	if len(c.Alert.Exec) > 0 {
		abs("alert.exec", c.Alert.Exec[0])
	}
	paths := map[string]bool{}
	for _, s := range c.Stores {
		abs("store.path", s.Path)
		if paths[s.Path] {
			t.Fatalf("store %s listed twice", s.Path)
		}
		paths[s.Path] = true
		if !slices.Contains([]StoreKind{KindAuto, KindHermes, KindGeneric}, s.Kind) {
			t.Fatalf("store kind %q", s.Kind)
		}
		checkPolicy(t, s.Policy)
	}
	for _, e := range c.Exclude {
		if e == "" || strings.Contains(e, "/") {
			t.Fatalf("exclude %q", e)
		}
	}
	if c.Reconcile.D < 100*time.Millisecond {
		t.Fatalf("reconcile %v", c.Reconcile.D)
	}
	if c.Guard == nil || c.DiscoverUsers == nil {
		t.Fatal("guard or discover_users left unset")
	}
	if !slices.Contains([]LogFormat{LogAuto, LogJSON, LogText, LogJournal}, c.Log.Format) {
		t.Fatalf("log format %q", c.Log.Format)
	}
	if c.Capture.MaxBytes < 0 {
		t.Fatalf("capture.max_bytes %d is negative", c.Capture.MaxBytes)
	}
	if c.Alert.Concurrency <= 0 || c.Alert.Timeout.D <= 0 || c.Alert.RateLimit.D <= 0 || c.Stall.Timeout.D < 0 {
		t.Fatalf("alert/stall: %+v %+v", c.Alert, c.Stall)
	}
	if c.Metrics.Listen != "" {
		host, _, err := net.SplitHostPort(c.Metrics.Listen)
		if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			t.Fatalf("metrics.listen %q is not loopback", c.Metrics.Listen)
		}
	}
	checkPolicy(t, c.Policy)
}

func checkPolicy(t *testing.T, p PolicyConfig) {
	t.Helper()
	for _, v := range []Policy{p.Replaced, p.SidecarLost, p.Mispaired} {
		if !slices.Contains([]Policy{PolicyTerminate, PolicyKill, PolicyResume, PolicyHold, PolicyObserve}, v) {
			t.Fatalf("policy %q", v)
		}
	}
	if p.Grace.D <= 0 {
		t.Fatalf("grace %v", p.Grace.D)
	}
}

// The lines the fuzzer's findings must name: before, these errors said
// "line 0" or came in the decoder's own "toml: line N (last key ...)" form,
// and an overflowing size wrapped to a negative budget.
func TestConfigErrorLines(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"[\"\"]", "line 1: unknown key"},
		{"\n\"\\", "line 2: "},
		{"guard = true\n[[store]]\npAth.00= \"\" ", "line 2: key store.pAth: incompatible types"},
		{"\nguard = \"yes\"\n", "line 2: key guard: incompatible types"},
		{"[capture]\nmax_bytes = \"9000000TiB\"\n", "line 2: key capture.max_bytes: \"9000000TiB\" is more than 8 EiB"},
		{"reconcile = \"5s\"\npolicy = {frobnicate = 1}\n", "line 2: unknown key policy.frobnicate"},
		{"guard = true\n'reconcil' = \"5s\"\n", "line 2: unknown key reconcil"},
		{"guard = true\nalert = {timeout = \"1s\", exec = [\"rel/x\"]}\n", "line 2: key alert.exec"},
		{"\nstore = [{path = \"/a.db\"}, {path = \"rel.db\"}]\n", "line 2: key store.path"},
		{"guard = true\n[[store]]\nkind = \"generic\"\n", "line 2: key store.path"},
		{"[[store]]\npath = \"/a.db\"\n[[store]]\npath = \"/a.db\"\n", "line 4: key store.path: \"/a.db\" is listed twice"},
		{"[policy]\n\n  \"replaced\" = \"nuke\"\n", "line 3: key policy.replaced"},
	} {
		_, err := Parse([]byte(c.doc))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to start with %q", c.doc, err, c.want)
		}
	}
}
