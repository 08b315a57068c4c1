package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// badHome is a Hermes home whose default store is mainDB's bytes (a store
// or junk) and whose profile "b" holds a healthy store.
func badHome(t *testing.T, root string, main []byte) string {
	t.Helper()
	home := filepath.Join(root, ".hermes")
	if err := os.MkdirAll(filepath.Join(home, "profiles", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if main == nil {
		if err := hermestest.CreateStore(filepath.Join(home, "state.db")); err != nil {
			t.Fatal(err)
		}
	} else {
		writeFile(t, filepath.Join(home, "state.db"), string(main))
	}
	if err := hermestest.CreateStore(filepath.Join(home, "profiles", "b", "state.db")); err != nil {
		t.Fatal(err)
	}
	return home
}

// wantExplained fails unless the verb failed naming path with a hint.
func wantExplained(t *testing.T, what string, code int, stderr, path, want string) {
	t.Helper()
	t.Logf("%s: %s", what, stderr)
	if code == exitOK || !strings.Contains(stderr, path) || !strings.Contains(stderr, "hint:") || !strings.Contains(stderr, want) {
		t.Errorf("%s: exit %d, stderr %q: want a failure naming %s with a hint (%q)", what, code, stderr, path, want)
	}
}

// Every SQLite error that reaches the operator names the file and says
// what to do: a state.db that is not SQLite, a profile that does not
// exist, and a store this user may not read (a real unprivileged user
// running agentctl), for adopt, export, restore and replay.
func TestSQLiteErrorsNameTheFile(t *testing.T) {
	base, bin := agentctlForAll(t, "sgsec2-cli-")
	vars := noDaemon(t)
	jsonl := filepath.Join(base, "s1.jsonl")
	writeFile(t, jsonl, `{"role": "user", "content": "A", "timestamp": 1}`+"\n")
	if err := os.Chmod(jsonl, 0o644); err != nil {
		t.Fatal(err)
	}
	junkBackup := filepath.Join(base, "junk-backup.db")
	writeFile(t, junkBackup, strings.Repeat("not sqlite ", 500))

	junk := badHome(t, filepath.Join(base, "junk"), []byte(strings.Repeat("definitely not sqlite ", 300)))
	junkDB := filepath.Join(junk, "state.db")
	t.Run("not SQLite", func(t *testing.T) {
		for _, c := range []struct {
			what string
			args []string
			path string
		}{
			{"adopt", []string{"adopt", "--from", "default", "--to", "b", "--session", "x", "--home", junk}, junkDB},
			{"export", []string{"export", "--profile", "default", "--home", junk, "--session", "x"}, junkDB},
			{"replay", []string{"replay", jsonl, "--profile", "default", "--home", junk, "--now"}, junkDB},
			{"restore of a junk backup", []string{"restore", junkBackup, "--profile", "b", "--home", junk}, junkBackup},
		} {
			r := ctl(t, vars, c.args...)
			wantExplained(t, c.what, r.code, r.stderr, c.path, "SQLite")
		}
	})
	t.Run("missing profile", func(t *testing.T) {
		for _, args := range [][]string{
			{"adopt", "--from", "nosuch", "--to", "b", "--session", "x", "--home", junk},
			{"export", "--profile", "nosuch", "--home", junk, "--session", "x"},
			{"replay", jsonl, "--profile", "nosuch", "--home", junk, "--now"},
			{"restore", junkBackup, "--profile", "nosuch", "--home", junk},
			{"status", "--profile", "nosuch", "--home", junk},
		} {
			r := ctl(t, vars, args...)
			wantExplained(t, args[0], r.code, r.stderr, "nosuch", "")
		}
	})
	t.Run("no permission", func(t *testing.T) {
		uid, gid := hermestest.AddUser(t, "sgsec2-noperm")
		// A healthy home the user may list but whose stores (root's,
		// 0600) it may not open.
		priv := badHome(t, filepath.Join(base, "priv"), nil)
		privDB := filepath.Join(priv, "state.db")
		for _, p := range []string{privDB, filepath.Join(priv, "profiles", "b", "state.db")} {
			if err := os.Chmod(p, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		run := func(args ...string) (int, string) {
			cmd := exec.Command(bin, args...)
			cmd.Env = []string{"HOME=" + base, "PATH=/usr/bin:/bin", socketEnv + "=" + filepath.Join(base, "no.sock")}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
			var errb strings.Builder
			cmd.Stderr = &errb
			err := cmd.Run()
			if _, ok := err.(*exec.ExitError); err != nil && !ok {
				t.Fatal(err)
			}
			return cmd.ProcessState.ExitCode(), errb.String()
		}
		for _, c := range []struct {
			what string
			args []string
		}{
			{"adopt", []string{"adopt", "--from", "default", "--to", "b", "--session", "x", "--home", priv}},
			{"export", []string{"export", "--profile", "default", "--home", priv, "--session", "x"}},
			{"replay", []string{"replay", jsonl, "--profile", "default", "--home", priv, "--now"}},
		} {
			code, stderr := run(c.args...)
			wantExplained(t, c.what, code, stderr, privDB, "")
		}
	})
}
