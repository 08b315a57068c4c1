package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/hermestest"
)

type ctlResult struct {
	code           int
	stdout, stderr string
}

// ctl runs one agentctl command line with vars as its whole environment.
func ctl(t *testing.T, vars map[string]string, args ...string) ctlResult {
	t.Helper()
	var out, errb bytes.Buffer
	e := newEnv(strings.NewReader(""), &out, &errb, func(k string) string { return vars[k] })
	code := runCLI(context.Background(), e, args)
	return ctlResult{code, out.String(), errb.String()}
}

// noDaemon is an environment whose control socket cannot exist, so a test
// never talks to an agentd running on the host.
func noDaemon(t *testing.T) map[string]string {
	return map[string]string{socketEnv: filepath.Join(t.TempDir(), "no-agent.sock")}
}

func decodeStatus(t *testing.T, r ctlResult) control.Status {
	t.Helper()
	var st control.Status
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json printed no Status (exit %d): %v\nstdout: %s\nstderr: %s", r.code, err, r.stdout, r.stderr)
	}
	if st.Version != control.StatusVersion {
		t.Fatalf("status version %d, want %d", st.Version, control.StatusVersion)
	}
	return st
}

func storeOf(t *testing.T, st control.Status, path string) control.StoreStatus {
	t.Helper()
	for _, s := range st.Stores {
		if s.Path == path {
			return s
		}
	}
	t.Fatalf("store %s not in status: %+v", path, st.Stores)
	return control.StoreStatus{}
}

func holderOf(s control.StoreStatus, pid int) *holders.Process {
	for i := range s.Holders {
		if s.Holders[i].Pid == pid {
			return &s.Holders[i]
		}
	}
	return nil
}

// heldRoles maps each role p holds to whether that inode is current.
func heldRoles(p *holders.Process) map[holders.Role]bool {
	m := map[holders.Role]bool{}
	for _, f := range p.Files {
		m[f.Role] = f.Current
	}
	return m
}

// wantExit is the exit code a status must give: refused whenever the scan
// cannot vouch for a store (this sandbox's PID 1 cannot be inspected even
// by root, so there it is always 3), else 0 unless an orphan exists.
func wantExit(st control.Status) int {
	for _, s := range st.Stores {
		if s.Verdict == holders.VerdictUnknown || len(s.Blind) > 0 || s.Orphans > 0 {
			return exitRefused
		}
	}
	return exitOK
}

// renameFreshOver puts a new empty Hermes store at db by rename(2), as a
// backup restore does, and removes the sidecars.
func renameFreshOver(t *testing.T, db string) {
	t.Helper()
	fresh := db + ".restore-tmp"
	if err := hermestest.CreateStore(fresh); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"-wal", "-shm"} {
		os.Remove(fresh + s)
	}
	if err := os.Rename(fresh, db); err != nil {
		t.Fatal(err)
	}
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
}
