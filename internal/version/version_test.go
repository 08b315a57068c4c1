package version

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	sqlite3 "modernc.org/sqlite/lib"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "-trimpath", Value: "true"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "551b98f0a1b2c3d4e5f60718293a4b5c6d7e8f90"},
		{Key: "vcs.time", Value: "2026-12-01T09:17:00Z"},
		{Key: "vcs.modified", Value: "false"},
	}
	cases := []struct {
		name     string
		bi       *debug.BuildInfo
		override string
		want     Info
	}{
		{"no build info", nil, "", Info{Version: Devel, GoVersion: runtime.Version()}},
		{"go run", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, "",
			Info{Version: Devel, GoVersion: "go1.26.0"}},
		{"go build at a tag", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.4.0"}, Settings: vcs}, "",
			Info{Version: "v1.4.0", Revision: "551b98f0a1b2c3d4e5f60718293a4b5c6d7e8f90", RevisionTime: "2026-12-01T09:17:00Z", GoVersion: "go1.26.0"}},
		{"modified checkout", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261201091700-551b98f0a1b2+dirty"},
			Settings: append(vcs[:len(vcs)-1:len(vcs)-1], debug.BuildSetting{Key: "vcs.modified", Value: "true"})}, "",
			Info{Version: "v0.0.0-20261201091700-551b98f0a1b2+dirty", Revision: "551b98f0a1b2c3d4e5f60718293a4b5c6d7e8f90",
				RevisionTime: "2026-12-01T09:17:00Z", Modified: true, GoVersion: "go1.26.0"}},
		{"go install module@version", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.3.2"}}, "",
			Info{Version: "v1.3.2", GoVersion: "go1.26.0"}},
		{"ldflags override wins", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261201091700-551b98f0a1b2"}, Settings: vcs}, " 1.4.0\n",
			Info{Version: "1.4.0", Revision: "551b98f0a1b2c3d4e5f60718293a4b5c6d7e8f90", RevisionTime: "2026-12-01T09:17:00Z", GoVersion: "go1.26.0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
			if got := fromBuildInfo(c.bi, c.override); got != c.want {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// TestReadAsksTheEmbeddedSQLite: the version comes from the SQLite linked
// into this binary, the one the agent opens stores with.
func TestReadAsksTheEmbeddedSQLite(t *testing.T) {
	i, err := Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if i.SQLite != sqlite3.SQLITE_VERSION {
		t.Errorf("SQLite %q, want the embedded library's %q", i.SQLite, sqlite3.SQLITE_VERSION)
	}
	if i.GoVersion != runtime.Version() {
		t.Errorf("Go version %q, want %q", i.GoVersion, runtime.Version())
	}
	if i.Version == "" {
		t.Error("empty version")
	}
}

func TestBuildInfoLabels(t *testing.T) {
	got := Info{Version: "v1.4.0", Revision: "abc", GoVersion: "go1.26.0", SQLite: "3.54.1"}.BuildInfoLabels()
	want := map[string]string{"version": "v1.4.0", "revision": "abc", "goversion": "go1.26.0", "sqlite": "3.54.1"}
	if len(got) != len(want) {
		t.Fatalf("labels %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
	if l := (Info{Version: Devel}).BuildInfoLabels(); l["revision"] != "unknown" || l["sqlite"] != "unknown" {
		t.Errorf("unknown values: %v", l)
	}
}

func TestDocument(t *testing.T) {
	i := Info{Version: "v1.4.0", Revision: "551b98f0a1b2c3d4e5f60718293a4b5c6d7e8f90", RevisionTime: "2026-12-01T09:17:00Z",
		GoVersion: "go1.26.0", Platform: "linux/amd64", SQLite: "3.54.1"}
	var b bytes.Buffer
	if err := NewDocument("agentd", i, nil).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"format": 1.0, "program": "agentd", "version": "v1.4.0",
		"revision": "551b98f0a1b2c3d4e5f60718293a4b5c6d7e8f90", "revision_time": "2026-12-01T09:17:00Z",
		"modified": false, "go_version": "go1.26.0", "platform": "linux/amd64", "sqlite_version": "3.54.1",
	}
	if len(got) != len(want) {
		t.Errorf("document has %d keys, want %d: %s", len(got), len(want), b.String())
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}

	b.Reset()
	if err := NewDocument("agentctl", Info{Version: Devel, GoVersion: "go1.26.0", Platform: "linux/amd64"}, errString("boom")).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	if first, _, _ := strings.Cut(text, "\n"); first != "agentctl devel" {
		t.Errorf("first line %q, want %q", first, "agentctl devel")
	}
	for _, s := range []string{"revision  unknown (no VCS information", "go        go1.26.0 linux/amd64", "sqlite    unknown: boom"} {
		if !strings.Contains(text, s) {
			t.Errorf("text lacks %q:\n%s", s, text)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }
