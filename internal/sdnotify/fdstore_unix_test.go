//go:build unix

package sdnotify

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The child side of TestFDStoreHandsKeptFilesToTheNextStart: what the
// started program finds in $LISTEN_FDS, one "name dev:ino" per line.
func TestMain(m *testing.M) {
	if os.Getenv("SDNOTIFY_TEST_LISTEN") == "1" {
		fds, err := ListenFDs(os.Getenv, os.Getpid())
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		for _, f := range fds {
			var st unix.Stat_t
			if err := unix.Fstat(int(f.File.Fd()), &st); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
			fmt.Printf("%s %d:%d\n", f.Name, st.Dev, st.Ino)
		}
		if v := os.Getenv(EnvListenFDs); v != "" {
			fmt.Println("error: LISTEN_FDS left set:", v)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func waitNames(t *testing.T, s *FDStore, want []string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(s.Names(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("store names %v, want %v", s.Names(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A file sent with FDSTORE=1 is kept under its name (the sender's copy
// closed, the inode unlinked: the store's copy keeps it), passed to the
// next start as fd 3 with LISTEN_FDNAMES and a LISTEN_PID that is the
// child's own, and closed by FDSTOREREMOVE=1.
func TestFDStoreHandsKeptFilesToTheNextStart(t *testing.T) {
	dir := t.TempDir()
	s, err := ListenFDStore(filepath.Join(dir, "notify.sock"), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n, err := New(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "state.db-wal")
	if err := os.WriteFile(path, []byte("frames"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if err := n.StoreFDs("pin.x.wal", f); err != nil {
		t.Fatal(err)
	}
	if err := n.Notify(Ready); err != nil { // no fds: ignored by the store
		t.Fatal(err)
	}
	waitNames(t, s, []string{"pin.x.wal"})
	f.Close()
	os.Remove(path)

	files, env, err := s.Files()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	argv := ListenWrapper(os.Args[0], "-test.run=^$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.ExtraFiles = files
	cmd.Env = append(append(os.Environ(), "SDNOTIFY_TEST_LISTEN=1"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := fmt.Sprintf("pin.x.wal %d:%d", st.Dev, st.Ino)
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("the child found %q, want %q", got, want)
	}

	if err := n.RemoveFDs("pin.x.wal"); err != nil {
		t.Fatal(err)
	}
	waitNames(t, s, nil)
}

// A child started without LISTEN_PID, or with another pid's, takes no fd.
func TestListenFDsIgnoresAnotherPids(t *testing.T) {
	env := map[string]string{EnvListenFDs: "1", EnvListenFDNames: "pin.x.wal"}
	if fds, err := ListenFDs(func(k string) string { return env[k] }, os.Getpid()); err != nil || len(fds) != 0 {
		t.Fatalf("without LISTEN_PID: %v %v", fds, err)
	}
	env[EnvListenPID] = fmt.Sprint(os.Getpid() + 1)
	if fds, err := ListenFDs(func(k string) string { return env[k] }, os.Getpid()); err != nil || len(fds) != 0 {
		t.Fatalf("for another pid: %v %v", fds, err)
	}
}

func TestValidFDName(t *testing.T) {
	for name, want := range map[string]bool{
		"pin.20261207T084302Z-cfe7a0.wal": true,
		"":                                false,
		"a:b":                             false,
		"with space":                      false,
		strings.Repeat("x", 255):          true,
		strings.Repeat("x", 256):          false,
		"tab\there":                       false,
	} {
		if got := ValidFDName(name); got != want {
			t.Errorf("ValidFDName(%q) = %v, want %v", name, got, want)
		}
	}
	if err := (&Notifier{}).StoreFDs("a:b", os.Stdin); err == nil {
		t.Error("StoreFDs took a name with a colon")
	}
}
