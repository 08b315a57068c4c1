package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/internal/journald/journaldtest"
)

// incidentUnderAgent starts a writer on the rig's store, waits for agentd
// to guard it, and renames a fresh store over it: one incident.
func incidentUnderAgent(t *testing.T, rig *agentdRig, ready func()) string {
	t.Helper()
	db := filepath.Join(rig.home, "state.db")
	hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Rate: 50})
	ready()
	restoreOver(t, db)
	return db
}

// TestJournalFields is issue 17's journalctl-style filtering: agentd run
// as systemd runs it ($JOURNAL_STREAM naming its stderr) sends its events
// to the journal socket with native fields, and an entry selected as
// `journalctl EVENT=incident.opened STORE=...` carries the incident.
func TestJournalFields(t *testing.T) {
	j := journaldtest.Listen(t)
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range j.All() {
				t.Logf("journal: %s", e.Get("MESSAGE"))
			}
		}
	})
	rig := newAgentdRig(t, "")
	p := rig.start(t, journalStreamOfStderr, "STATEGUARD_JOURNAL_SOCKET="+j.Socket)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := j.WaitFor(ctx, map[string]string{"EVENT": "agent.started", "SYSLOG_IDENTIFIER": "agentd", "PRIORITY": "6"}); err != nil {
		t.Fatal(err)
	}
	db := incidentUnderAgent(t, rig, func() {
		if _, err := j.WaitFor(ctx, map[string]string{"EVENT": "guard.armed", "STORE": filepath.Join(rig.home, "state.db")}); err != nil {
			t.Fatal(err)
		}
	})
	opened, err := j.WaitFor(ctx, map[string]string{"EVENT": "incident.opened", "STORE": db})
	if err != nil {
		t.Fatal(err)
	}
	inc := opened.Get("INCIDENT")
	if inc == "" || opened.Get("PRIORITY") != "3" || opened.Get("PROFILE") != "default" || opened.Get("KIND") == "" ||
		!strings.HasPrefix(opened.Get("MESSAGE"), "orphaned generation under a live process ") ||
		!strings.HasSuffix(opened.Get("CODE_FILE"), ".go") || opened.Get("SUBSYSTEM") == "" {
		t.Errorf("incident.opened entry: %v", opened.Fields)
	}
	for _, event := range []string{"holder.frozen", "capture.written", "incident.resolved"} {
		e, err := j.WaitFor(ctx, map[string]string{"EVENT": event, "INCIDENT": inc})
		if err != nil {
			t.Fatal(err)
		}
		if event == "holder.frozen" && (e.Get("PID") == "" || e.Get("PRIORITY") != "4") {
			t.Errorf("holder.frozen entry: %v", e.Fields)
		}
	}
	p.stop(t)
	if out := strings.TrimSpace(p.log()); out != "" {
		t.Errorf("with the journal taking every record, stderr should stay empty; it has:\n%s", out)
	}
}

// startJournald runs the real systemd-journald as root in a private mount
// namespace: its /run/systemd, /run/log and journald.conf (volatile
// storage) are directories of the test, so the host's journal is
// untouched. It returns the native socket and the journal directory.
func startJournald(t *testing.T) (socket, journalDir string) {
	t.Helper()
	journald := "/lib/systemd/systemd-journald"
	_, jcErr := exec.LookPath("journalctl")
	unshare, err := exec.LookPath("unshare")
	if _, serr := os.Stat(journald); serr != nil || jcErr != nil || err != nil || os.Geteuid() != 0 {
		t.Skip("needs root, unshare, systemd-journald and journalctl (Debian package systemd)")
	}
	base, err := os.MkdirTemp("", "sg-svc2-jd-") // short: a unix socket path lives under it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	run, logs := filepath.Join(base, "run"), filepath.Join(base, "log")
	conf := filepath.Join(base, "journald.conf")
	for _, d := range []string{run, logs} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(conf, []byte("[Journal]\nStorage=volatile\nForwardToSyslog=no\nForwardToWall=no\n"), 0o644)
	script := `set -e
mount --bind "$1" /run/systemd
mkdir -p /run/log && mount --bind "$2" /run/log
[ -e /etc/systemd/journald.conf ] && mount --bind "$3" /etc/systemd/journald.conf
exec "$4"`
	jd := exec.Command(unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", run, logs, conf, journald)
	jdOut, _ := os.Create(filepath.Join(base, "journald.out"))
	jd.Stdout, jd.Stderr = jdOut, jdOut
	if err := jd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("journalctl", "-D", filepath.Join(logs, "journal"), "-o", "short-precise", "--no-pager").CombinedOutput()
			t.Logf("what agentd sent to the journal:\n%s", out)
		}
		jd.Process.Kill()
		jd.Wait()
	})
	socket = filepath.Join(run, "journal", "socket")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(socket); err == nil {
			return socket, filepath.Join(logs, "journal")
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(jdOut.Name())
			t.Fatalf("systemd-journald did not create %s:\n%s", socket, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// journalctlWait runs journalctl on dir with the matches until it finds
// an entry (as JSON), or fails the test after a minute.
func journalctlWait(t *testing.T, dir string, match ...string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := exec.Command("journalctl", append([]string{"-D", dir, "-o", "json", "--no-pager"}, match...)...).Output()
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var e map[string]any
			if json.Unmarshal([]byte(line), &e) == nil {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("journalctl %q found nothing", match)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestJournalFieldsRealJournald sends agentd's records to the real
// systemd-journald and selects them with the real journalctl, as an
// operator would.
func TestJournalFieldsRealJournald(t *testing.T) {
	sock, dir := startJournald(t)
	rig := newAgentdRig(t, "")
	p := rig.start(t, journalStreamOfStderr, "STATEGUARD_JOURNAL_SOCKET="+sock)
	db := filepath.Join(rig.home, "state.db")
	incidentUnderAgent(t, rig, func() { journalctlWait(t, dir, "EVENT=guard.armed", "STORE="+db) })
	e := journalctlWait(t, dir, "SYSLOG_IDENTIFIER=agentd", "EVENT=incident.opened", "STORE="+db)
	inc, _ := e["INCIDENT"].(string)
	if e["PRIORITY"] != "3" || inc == "" || e["_TRANSPORT"] != "journal" || e["_PID"] != strconv.Itoa(p.cmd.Process.Pid) {
		t.Errorf("journalctl EVENT=incident.opened: %v", e)
	}
	journalctlWait(t, dir, "EVENT=capture.written", "INCIDENT="+inc)
}
