package main

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// TestContainerWriter runs the test writer the way the container-writer
// fault does (its own mount and pid namespaces, the profile directory
// bind-mounted at another path) and checks what the fault relies on: the
// writer commits into the host's store through the volume, its fds name
// the volume path (empty on the host), its acks are readable from the
// host, the slot knows its host pid, and SIGTERM, SIGSTOP and SIGKILL from
// the host reach it and are told apart when it ends.
func TestContainerWriter(t *testing.T) {
	if why := probeContainers(context.Background()); why != "" {
		t.Skip("containers: " + why)
	}
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("sqlite3 CLI not installed (.ci/run installs it)")
	}
	bin, err := hermestest.WriterBinary()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	e := &env{root: root, acks: filepath.Join(root, "acks"), logs: filepath.Join(root, "logs"), writer: bin}
	home := filepath.Join(root, "home")
	for _, d := range []string{e.acks, e.logs, home} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	p := &profile{name: "default", dir: home, db: filepath.Join(home, "state.db")}
	unshare, _ := exec.LookPath("unshare")
	s, err := newContainerSlot(e, p, 1, 50, slog.New(slog.DiscardHandler), func() time.Duration { return 0 }, unshare)
	if err != nil {
		t.Fatal(err)
	}
	defer s.opts.Stderr.(*os.File).Close()
	w, pid, err := s.spawn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Kill(); <-w.Done() })
	// sh is the namespace's init (pid 1), mount ran as pid 2.
	if ns, err := nsPids(pid); err != nil || len(ns) != 2 || ns[1] <= 1 {
		t.Errorf("writer %d NSpid %v (%v), want a pid past its init in a namespace of its own", pid, ns, err)
	}
	links := fdLinks(t, pid)
	if !strings.Contains(links, s.container+"/state.db") || strings.Contains(links, p.db) {
		t.Errorf("writer's fds %s: want the volume path %s, not the host's %s", links, s.container, p.db)
	}
	if ents, err := os.ReadDir(s.container); err != nil || len(ents) != 0 {
		t.Errorf("the volume on the host: %v %v, want an empty directory", ents, err)
	}
	hermestest.WaitAckFile(t, s.opts.Ack, 5)
	if out, err := exec.Command("sqlite3", "-readonly", p.db, "select count(*) > 0 from messages where session_id = '"+s.name+"'").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Errorf("the host's store has no row of the container writer: %s %v", out, err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, true)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, false)
	if err := w.Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, werr := w.Exited(); s.exitReason(werr) != "exit 0 (SIGTERM handled)" {
		t.Errorf("stopped writer ended %q (%v)", s.exitReason(werr), werr)
	}
	w2, pid2, err := s.spawn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w2.Kill(); <-w2.Done() })
	if err := syscall.Kill(pid2, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w2.Done()
	if _, werr := w2.Exited(); s.exitReason(werr) != "SIGKILL" {
		t.Errorf("killed writer ended %q (%v), want SIGKILL", s.exitReason(werr), werr)
	}
}

func fdLinks(t *testing.T, pid int) string {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, l)
		}
	}
	return strings.Join(out, " ")
}

// waitState polls /proc/<pid>/status until pid is (or is no longer)
// stopped.
func waitState(t *testing.T, pid int, stopped bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(string(b), "\nState:\t")
		if len(rest) > 0 && (rest[0] == 'T' || rest[0] == 't') == stopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d state %.1s, want stopped: %t", pid, rest, stopped)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
