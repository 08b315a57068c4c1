//go:build linux

package recovery

import (
	"bytes"
	"context"
	"flag"
	"html"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

var updateGolden = flag.Bool("update", false, "rewrite golden files under testdata/")

// exportFixture is a store whose session "s-export" has one message of
// every shape an export must show: plain turns, reasoning, a tool call
// with null content and its result, an inactive row, a compressed
// summary, markdown and HTML in content, non-ASCII, a BLOB, a whole-valued
// REAL, text that is not UTF-8 and an infinite REAL.
func exportFixture(t *testing.T) (*sqlStore, string) {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	noErr(t, err)
	s := newSQLStore(t, filepath.Join(dir, "state.db"))
	s.session("s-export", "cli", 1759303488.5, "title", "Lisbon <trip> & plans", "model", "test-model",
		"ended_at", 1759307088.0, "end_reason", "agent_close", "profile_name", "work")
	s.add("s-export", "user", "Plan a **3-day** trip to Lisbon.\nBudget: 500 €; see <https://example.com/guide?page=2>.", 1759303490.0)
	s.add("s-export", "assistant", "Sure — let me look things up.", 1759303491.25,
		"reasoning", "The user wants an itinerary.\nCheck the weather first.", "finish_reason", "tool_calls",
		"tool_calls", `[{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Lisbon\"}"}}]`)
	s.add("s-export", "tool", "{\"temp_c\": 21, \"sky\": \"clear\"}\n```not a fence```", 1759303492.0,
		"tool_call_id", "call_1", "tool_name", "weather")
	s.add("s-export", "assistant", nil, 1759303493.0, "finish_reason", "tool_calls",
		"tool_calls", `[{"id":"call_2","type":"function","function":{"name":"search","arguments":"{}"}}]`)
	s.add("s-export", "assistant", "Day 1: Alfama 🏰, 日本語 too.\n\n```python\nprint('hi')\n```", 1759303494.0,
		"display_metadata", `{"kind":"final"}`, "display_identity", []byte{0, 1, 2, 0xff})
	s.add("s-export", "user", "an earlier draft (inactive)", 1759303495.0, "active", 0)
	s.add("s-export", "assistant", "Summary of the conversation so far.", 1759303496.0, "_compressed_summary", 1)
	s.add("s-export", "user", "<script>alert(1)</script> & \"quotes\"", 1759303497.0)
	s.session("other", "cli", 1759303400.0)
	s.add("other", "user", "not this session", 1759303400.0)
	s.exec("UPDATE messages SET platform_message_id = CAST(X'66FF6F' AS TEXT), token_count = 9e999 WHERE id = 2")
	return s, s.path
}

func readFixtureExport(t *testing.T, s *sqlStore) *Export {
	t.Helper()
	x, err := ReadExport(context.Background(), s.db, "s-export")
	noErr(t, err)
	x.Source = "state.db"
	return x
}

func renderExport(t *testing.T, x *Export, format string) []byte {
	t.Helper()
	var b bytes.Buffer
	var err error
	switch format {
	case "json":
		err = x.WriteJSON(&b)
	case "md":
		err = x.WriteMarkdown(&b)
	case "html":
		err = x.WriteHTML(&b)
	}
	noErr(t, err)
	return b.Bytes()
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "export", name)
	if *updateGolden {
		noErr(t, os.MkdirAll(filepath.Dir(path), 0o755))
		noErr(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	noErr(t, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the golden file (go test -run %s -update rewrites it):\n%s", path, t.Name(), got)
	}
}

// The JSON export round-trips every column of every row, with its type:
// text, integers, reals (whole-valued ones too), NULL, BLOBs, non-UTF-8
// text and infinities.
func TestExportJSONRoundTrip(t *testing.T) {
	s, _ := exportFixture(t)
	x := readFixtureExport(t, s)
	if len(x.Messages) != 8 {
		t.Fatalf("%d messages", len(x.Messages))
	}
	back, err := ParseExportJSON(bytes.NewReader(renderExport(t, x, "json")))
	noErr(t, err)
	if !reflect.DeepEqual(back.Session, x.Session) {
		t.Fatalf("session:\n%#v\nwant\n%#v", back.Session, x.Session)
	}
	if !reflect.DeepEqual(back.Messages, x.Messages) {
		for i := range x.Messages {
			for j, c := range x.Messages[i].Cols {
				if !reflect.DeepEqual(back.Messages[i].Vals[j], x.Messages[i].Vals[j]) {
					t.Errorf("message %d %s: %#v, want %#v", i, c, back.Messages[i].Vals[j], x.Messages[i].Vals[j])
				}
			}
		}
		t.FailNow()
	}
	m := x.Messages[1]
	if v, _ := m.Get("token_count"); !math.IsInf(v.(float64), 1) {
		t.Fatalf("fixture lost its infinity: %v", v)
	}
	if v, _ := m.Get("timestamp"); v != 1759303491.25 {
		t.Fatalf("timestamp %v", v)
	}
	if v, _ := x.Messages[4].Get("display_identity"); !bytes.Equal(v.([]byte), []byte{0, 1, 2, 0xff}) {
		t.Fatalf("blob %v", v)
	}
	if back.SessionID != "s-export" {
		t.Fatalf("session id %q", back.SessionID)
	}
}

func TestExportGolden(t *testing.T) {
	s, _ := exportFixture(t)
	for _, f := range []string{"json", "md", "html"} {
		golden(t, "basic/session."+f, renderExport(t, readFixtureExport(t, s), f))
	}
}

// md and html hold every message of the session and nothing of others;
// html escapes what it shows.
func TestExportEveryMessage(t *testing.T) {
	s, _ := exportFixture(t)
	x := readFixtureExport(t, s)
	md, page := string(renderExport(t, x, "md")), string(renderExport(t, x, "html"))
	for _, m := range x.Messages {
		c, ok := m.Text("content")
		if tc, _ := m.Text("tool_calls"); tc != "" {
			c, ok = `"name": "`, true
		}
		if !ok {
			continue
		}
		for _, line := range strings.Split(c, "\n") {
			if !strings.Contains(md, line) {
				t.Errorf("md lacks %q", line)
			}
			if !strings.Contains(page, html.EscapeString(line)) {
				t.Errorf("html lacks %q", html.EscapeString(line))
			}
		}
	}
	if strings.Contains(md, "not this session") || strings.Contains(page, "not this session") {
		t.Error("another session's message was exported")
	}
	if strings.Contains(page, "<script>") {
		t.Error("html shows content unescaped")
	}
	if n := strings.Count(page, `<li class="msg `); n != len(x.Messages) {
		t.Errorf("html has %d messages, want %d", n, len(x.Messages))
	}
	if n := strings.Count(md, "\n### "); n != len(x.Messages) {
		t.Errorf("md has %d message headings, want %d", n, len(x.Messages))
	}
}

// The page needs nothing from anywhere: no scripts, no links to fetch, no
// url() in styles, and a policy that forbids fetching anyway.
func TestExportHTMLSelfContained(t *testing.T) {
	s, _ := exportFixture(t)
	page := string(renderExport(t, readFixtureExport(t, s), "html"))
	fetch := regexp.MustCompile(`(?i)<script|<link|<img|<iframe|<object|<embed|\s(src|href|srcset|action|poster)\s*=|url\(|@import`)
	if m := fetch.FindString(page); m != "" {
		t.Fatalf("the page fetches or runs something: %q", m)
	}
	if !strings.Contains(page, `content="default-src 'none'; style-src 'unsafe-inline'"`) {
		t.Fatal("no Content-Security-Policy forbidding fetches")
	}
}

// The page renders in a real browser: headless Chromium, when installed,
// takes a screenshot (kept as a test artifact) and its DOM holds every
// message.
func TestExportHTMLChromium(t *testing.T) {
	bin := ""
	for _, c := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(c); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("Chromium is not installed (looked for chromium, chromium-browser, google-chrome); the page is checked without a browser by TestExportHTMLSelfContained")
	}
	s, _ := exportFixture(t)
	x := readFixtureExport(t, s)
	dir := t.ArtifactDir()
	page := filepath.Join(dir, "session.html")
	noErr(t, os.WriteFile(page, renderExport(t, x, "html"), 0o644))
	shot := filepath.Join(dir, "session.png")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1000,1600"}
	out, err := exec.CommandContext(ctx, bin, append(args, "--screenshot="+shot, "file://"+page)...).CombinedOutput()
	if err != nil {
		t.Fatalf("chromium screenshot: %v\n%s", err, out)
	}
	fi, err := os.Stat(shot)
	if err != nil || fi.Size() < 1000 {
		t.Fatalf("no screenshot: %v %v", fi, err)
	}
	png, err := os.ReadFile(shot)
	noErr(t, err)
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatal("the screenshot is not a PNG")
	}
	dom, err := exec.CommandContext(ctx, bin, append(args, "--dump-dom", "file://"+page)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	if n := strings.Count(string(dom), `class="msg `); n != len(x.Messages) {
		t.Fatalf("the rendered DOM has %d messages, want %d", n, len(x.Messages))
	}
	t.Logf("screenshot of the exported page: %s (%d bytes)", shot, fi.Size())
}

// Exporting from a capture reads what was salvaged, through a private
// copy that is removed again.
func TestExportCapture(t *testing.T) {
	s, _ := exportFixture(t)
	s.checkpoint()
	s.add("s-export", "user", "written only to the orphan's WAL", 1759303600.0)
	capDir := s.capture("sidecar_lost", "inc-export")
	tmp := t.TempDir()
	x, err := ExportCapture(context.Background(), capDir, tmp, "s-export")
	noErr(t, err)
	if len(x.Messages) != 9 || x.Source != capDir {
		t.Fatalf("%d messages from %s", len(x.Messages), x.Source)
	}
	if c, _ := x.Messages[8].Text("content"); c != "written only to the orphan's WAL" {
		t.Fatalf("last message %q", c)
	}
	emptyDir(t, tmp)
	if _, err := ExportCapture(context.Background(), capDir, tmp, "nope"); err == nil || !strings.Contains(err.Error(), "does not hold it") {
		t.Fatalf("unknown session: %v", err)
	}
}
