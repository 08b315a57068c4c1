package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// realTemp is t.TempDir with symlinks resolved (macOS /var → /private/var),
// as discovery reports resolved roots.
func realTemp(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func env(kv ...string) func(string) string {
	return func(k string) string {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1]
			}
		}
		return ""
	}
}

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	p := filepath.Join(parts...)
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func createStore(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := hermestest.CreateStore(path); err != nil {
		t.Fatal(err)
	}
}

func profilesOf(ss []Store) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Profile)
	}
	return out
}

func noProblems(t *testing.T, ps []Problem) {
	t.Helper()
	for _, p := range ps {
		t.Errorf("unexpected problem: %v", p)
	}
}

func TestDiscoverDefaultAndNamedProfiles(t *testing.T) {
	user := realTemp(t)
	root := filepath.Join(user, ".hermes")
	createStore(t, filepath.Join(root, "state.db"))
	createStore(t, filepath.Join(root, "profiles", "alpha", "state.db"))
	mkdir(t, root, "profiles", "beta-2_x") // no state.db yet
	createStore(t, filepath.Join(root, "profiles", "Work", "state.db"))
	mkdir(t, root, "profiles", "-dash")
	mkdir(t, root, "profiles", strings.Repeat("a", 65))
	createStore(t, filepath.Join(root, "profiles", "default", "state.db"))
	createStore(t, filepath.Join(root, "profiles", "gone", "state.db"))
	mkdir(t, root, "profiles", ".deleted")
	writeFile(t, filepath.Join(root, "profiles", ".deleted", "gone"), "")
	writeFile(t, filepath.Join(root, "profiles", "stray"), "a file, not a profile")

	o := DiscoverOptions{Getenv: env(), UserHome: user, CurrentUserOnly: true}
	stores, problems := Discover(o)
	noProblems(t, problems)
	want := []Store{
		{Profile: "default", Home: root, Path: filepath.Join(root, "state.db"), Kind: Hermes},
		{Profile: "alpha", Home: root, Path: filepath.Join(root, "profiles", "alpha", "state.db"), Kind: Hermes},
		{Profile: "beta-2_x", Home: root, Path: filepath.Join(root, "profiles", "beta-2_x", "state.db"), Kind: Hermes},
	}
	if !slices.Equal(withoutDirIDs(t, stores), want) {
		t.Fatalf("stores:\n got %+v\nwant %+v", stores, want)
	}
	s := stores[1]
	if s.Dir() != filepath.Join(root, "profiles", "alpha") || s.WALPath() != s.Path+"-wal" ||
		s.SHMPath() != s.Path+"-shm" || s.Key() != s.Path {
		t.Fatalf("paths of %+v: %s %s %s %s", s, s.Dir(), s.WALPath(), s.SHMPath(), s.Key())
	}
	again, _ := Discover(o)
	if !slices.Equal(stores, again) {
		t.Fatalf("second discovery differs: %+v", again)
	}
}

func TestProfilesAppearLater(t *testing.T) {
	root := filepath.Join(realTemp(t), ".hermes")
	createStore(t, filepath.Join(root, "state.db"))
	h := Home{Root: root, Source: SourceConfig}
	ss, ps := Profiles(h)
	noProblems(t, ps)
	if got := profilesOf(ss); !slices.Equal(got, []string{"default"}) {
		t.Fatalf("before profiles/: %v", got)
	}
	mkdir(t, root, "profiles", "late")
	ss, ps = Profiles(h)
	noProblems(t, ps)
	if got := profilesOf(ss); !slices.Equal(got, []string{"default", "late"}) {
		t.Fatalf("after profiles/late: %v", got)
	}
	mkdir(t, root, "profiles", ".deleted")
	writeFile(t, filepath.Join(root, "profiles", ".deleted", "late"), "")
	ss, _ = Profiles(h)
	if got := profilesOf(ss); !slices.Equal(got, []string{"default"}) {
		t.Fatalf("after tombstone: %v", got)
	}
}

func TestMissingHome(t *testing.T) {
	tmp := realTemp(t)
	// A default home that does not exist is simply not there.
	homes, ps := DiscoverHomes(DiscoverOptions{Getenv: env(), UserHome: tmp, CurrentUserOnly: true})
	if len(homes) != 0 || len(ps) != 0 {
		t.Fatalf("no ~/.hermes: homes %+v problems %v", homes, ps)
	}
	// Explicit ones are problems.
	missing := filepath.Join(tmp, "configured")
	homes, ps = DiscoverHomes(DiscoverOptions{Getenv: env("HERMES_HOME", filepath.Join(tmp, "env")),
		CurrentUserOnly: true, ExtraHomes: []string{missing}})
	if len(homes) != 0 || len(ps) != 2 || !errors.Is(ps[0], ErrMissingHome) || !errors.Is(ps[1], ErrMissingHome) ||
		ps[1].Path != missing || ps[1].Hint == "" {
		t.Fatalf("explicit missing homes: homes %+v problems %v", homes, ps)
	}
	// A home that goes away after discovery.
	ss, ps := Profiles(Home{Root: missing})
	if len(ss) != 0 || len(ps) != 1 || !errors.Is(ps[0], ErrMissingHome) {
		t.Fatalf("Profiles of a missing home: %+v %v", ss, ps)
	}
	// A file where a home should be.
	writeFile(t, missing, "")
	if homes, ps = DiscoverHomes(DiscoverOptions{Getenv: env(), CurrentUserOnly: true, ExtraHomes: []string{missing}}); len(homes) != 0 || len(ps) != 1 {
		t.Fatalf("file as home: %+v %v", homes, ps)
	}
}

// fingerprint is everything that would show a write to a file or its
// family: content, identity and sidecars.
func fingerprint(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Lstat(path)
	s := fmt.Sprintf("%x %v %v", b, fi.ModTime().UnixNano(), fileid.Of(fi))
	for _, suf := range []string{"-wal", "-shm", "-journal"} {
		if _, err := os.Lstat(path + suf); err == nil {
			s += " has" + suf
		}
	}
	return s
}

func TestSymlinkAndNonSQLiteStateDB(t *testing.T) {
	tmp := realTemp(t)
	root := filepath.Join(tmp, ".hermes")
	createStore(t, filepath.Join(root, "state.db"))
	target := filepath.Join(tmp, "elsewhere", "state.db")
	createStore(t, target)
	link := filepath.Join(mkdir(t, root, "profiles", "link"), "state.db")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(target), filepath.Join(root, "profiles", "dirlink")); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(mkdir(t, root, "profiles", "junk"), "state.db")
	writeFile(t, junk, "this is a text file and no database at all\n")
	fifo := filepath.Join(mkdir(t, root, "profiles", "fifo"), "state.db")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	mkdir(t, root, "profiles", "dir", "state.db")
	beforeTarget, beforeJunk := fingerprint(t, target), fingerprint(t, junk)

	stores, problems := Profiles(Home{Root: root})
	if got := profilesOf(stores); !slices.Equal(got, []string{"default", "junk"}) {
		t.Fatalf("stores %v", got)
	}
	var probPaths []string
	for _, p := range problems {
		if !errors.Is(p, ErrNotRegular) || p.Hint == "" {
			t.Errorf("problem %v: want ErrNotRegular with a hint", p)
		}
		probPaths = append(probPaths, p.Path)
	}
	wantProbs := []string{
		filepath.Join(root, "profiles", "dir", "state.db"),
		filepath.Join(root, "profiles", "dirlink"),
		fifo,
		link,
	}
	if !slices.Equal(probPaths, wantProbs) {
		t.Fatalf("problems at %v, want %v", probPaths, wantProbs)
	}

	// Every other entry point refuses the link and the FIFO too.
	for _, p := range []string{link, fifo} {
		if _, err := OpenReadOnly(p); !errors.Is(err, ErrNotRegular) {
			t.Errorf("OpenReadOnly(%s): %v", p, err)
		}
		if _, err := ProbeFile(t.Context(), p); !errors.Is(err, ErrNotRegular) {
			t.Errorf("ProbeFile(%s): %v", p, err)
		}
		if _, err := ReadGeneration(p); !errors.Is(err, ErrNotRegular) {
			t.Errorf("ReadGeneration(%s): %v", p, err)
		}
	}
	// The non-SQLite store is reported by the probe, never given to SQLite.
	_, err := ProbeFile(t.Context(), junk)
	var nh *NotHermesError
	if !errors.Is(err, ErrNotSQLite) || !errors.As(err, &nh) || nh.Path != junk {
		t.Fatalf("ProbeFile(junk): %v", err)
	}
	if g, err := ReadGeneration(junk); err != nil || g.MainHeaderOK || g.WAL.Exists {
		t.Fatalf("ReadGeneration(junk): %+v, %v", g, err)
	}
	if a := fingerprint(t, target); a != beforeTarget {
		t.Fatalf("link target touched:\n%s\n%s", beforeTarget, a)
	}
	if a := fingerprint(t, junk); a != beforeJunk {
		t.Fatalf("junk touched:\n%s\n%s", beforeJunk, a)
	}
}

func TestHermesHomeEnv(t *testing.T) {
	tmp := realTemp(t)
	root := mkdir(t, tmp, "custom")
	mkdir(t, root, "profiles", "work")
	mkdir(t, tmp, "user", ".hermes") // ignored while HERMES_HOME is set
	for _, hh := range []string{root, filepath.Join(root, "profiles", "work"), root + "/profiles/work/"} {
		homes, ps := DiscoverHomes(DiscoverOptions{Getenv: env("HERMES_HOME", hh), UserHome: filepath.Join(tmp, "user"), CurrentUserOnly: true})
		noProblems(t, ps)
		if want := []Home{{Root: root, Source: SourceEnv, UID: os.Geteuid()}}; !slices.Equal(homes, want) {
			t.Errorf("HERMES_HOME=%s: %+v, want %+v", hh, homes, want)
		}
	}
	// profiles/<bad name> is not a profile, so no normalisation.
	odd := mkdir(t, root, "profiles", "Not_A_Profile")
	homes, _ := DiscoverHomes(DiscoverOptions{Getenv: env("HERMES_HOME", odd), CurrentUserOnly: true})
	if len(homes) != 1 || homes[0].Root != odd {
		t.Errorf("HERMES_HOME=%s: %+v", odd, homes)
	}
	// The data-dir suffix applies to ~/.hermes.
	dev := mkdir(t, tmp, "user", ".hermes-dev")
	homes, _ = DiscoverHomes(DiscoverOptions{Getenv: env("HERMES_DATA_DIR_SUFFIX", "-dev"), UserHome: filepath.Join(tmp, "user"), CurrentUserOnly: true})
	if len(homes) != 1 || homes[0].Root != dev || homes[0].Source != SourceUser {
		t.Errorf("suffix: %+v", homes)
	}
}

func TestPasswdDiscovery(t *testing.T) {
	tmp := realTemp(t)
	alice := mkdir(t, tmp, "home", "alice")
	aliceRoot := mkdir(t, alice, ".hermes")
	createStore(t, filepath.Join(aliceRoot, "state.db"))
	bob := mkdir(t, tmp, "home", "bob") // no .hermes
	erin := mkdir(t, tmp, "home", "erin")
	if err := os.Symlink(aliceRoot, filepath.Join(erin, ".hermes")); err != nil {
		t.Fatal(err)
	}
	frank := mkdir(t, tmp, "home", "frank")
	writeFile(t, filepath.Join(frank, ".hermes"), "not a dir")
	wantUID := os.Geteuid()
	if os.Geteuid() == 0 {
		wantUID = 4242
		if err := os.Chown(aliceRoot, wantUID, wantUID); err != nil {
			t.Fatal(err)
		}
	}
	passwd := filepath.Join(tmp, "passwd")
	writeFile(t, passwd, strings.Join([]string{
		"# comment",
		"alice:x:1001:1001:Alice:" + alice + ":/bin/sh",
		"broken line without fields",
		"bob:x:1002:1002::" + bob + ":/bin/sh",
		"carol:x:1003:1003::" + filepath.Join(tmp, "home", "carol") + ":/bin/sh",
		"dave:x:1004:1004::" + alice + "/:/bin/sh",
		"erin:x:1005:1005::" + erin + ":/bin/sh",
		"relative:x:1006:1006::home/rel:/bin/sh",
		"frank:x:1007:1007::" + frank + ":/bin/sh",
		"",
	}, "\n"))
	nobody := mkdir(t, tmp, "nobody")

	homes, ps := DiscoverHomes(DiscoverOptions{Getenv: env(), UserHome: nobody, AllUsers: true, PasswdPath: passwd})
	want := []Home{{Root: aliceRoot, Source: SourcePasswd, UID: wantUID}}
	if !slices.Equal(homes, want) {
		t.Fatalf("homes %+v, want %+v", homes, want)
	}
	// frank's .hermes is a file: worth telling the operator. erin's is a
	// link to alice's home: as root (alice's home then belongs to another
	// uid) it is refused and reported, never watched as erin's.
	wantProbs := []string{filepath.Join(frank, ".hermes")}
	if os.Geteuid() == 0 {
		wantProbs = []string{filepath.Join(erin, ".hermes"), filepath.Join(frank, ".hermes")}
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.Path)
	}
	if !slices.Equal(got, wantProbs) {
		t.Fatalf("problems %v", ps)
	}
	if os.Geteuid() == 0 && !errors.Is(ps[0], ErrUntrustedLink) {
		t.Fatalf("erin's link: %v, want ErrUntrustedLink", ps[0])
	}

	// The running user's home wins over the same home from passwd, and an
	// explicit duplicate adds nothing.
	homes, _ = DiscoverHomes(DiscoverOptions{Getenv: env(), UserHome: alice, AllUsers: true, PasswdPath: passwd,
		ExtraHomes: []string{filepath.Join(erin, ".hermes")}})
	if len(homes) != 1 || homes[0].Source != SourceUser {
		t.Fatalf("dedupe: %+v", homes)
	}
	// CurrentUserOnly wins over AllUsers; an unreadable passwd is a problem.
	if homes, _ = DiscoverHomes(DiscoverOptions{Getenv: env(), UserHome: nobody, AllUsers: true, CurrentUserOnly: true, PasswdPath: passwd}); len(homes) != 0 {
		t.Fatalf("CurrentUserOnly: %+v", homes)
	}
	if _, ps = DiscoverHomes(DiscoverOptions{Getenv: env(), UserHome: nobody, AllUsers: true, PasswdPath: filepath.Join(tmp, "nopasswd")}); len(ps) != 1 {
		t.Fatalf("missing passwd: %v", ps)
	}
}

func TestDiscoverExtraStores(t *testing.T) {
	tmp := realTemp(t)
	root := filepath.Join(tmp, "user", ".hermes")
	createStore(t, filepath.Join(root, "state.db"))
	generic := filepath.Join(mkdir(t, tmp, "app"), "data.sqlite")
	notYet := filepath.Join(tmp, "app", "later.db")
	link := filepath.Join(tmp, "app", "link.db")
	if err := os.Symlink(generic, link); err != nil {
		t.Fatal(err)
	}
	createStore(t, generic)
	stores, ps := Discover(DiscoverOptions{
		Getenv: env(), UserHome: filepath.Join(tmp, "user"), CurrentUserOnly: true,
		ExtraStores: []string{generic, filepath.Join(root, "state.db"), notYet, link, filepath.Join(tmp, "nodir", "x.db")},
	})
	want := []Store{
		{Home: filepath.Join(tmp, "app"), Path: generic, Kind: Generic},
		{Home: filepath.Join(tmp, "app"), Path: notYet, Kind: Generic},
		{Profile: "default", Home: root, Path: filepath.Join(root, "state.db"), Kind: Hermes},
	}
	if !slices.Equal(withoutDirIDs(t, stores), want) {
		t.Fatalf("stores:\n got %+v\nwant %+v", stores, want)
	}
	if len(ps) != 2 || ps[0].Path != link || !errors.Is(ps[0], ErrNotRegular) {
		t.Fatalf("problems %v", ps)
	}
}

// withoutDirIDs checks every store that exists has its directory's
// identity recorded, and returns the stores without it for comparison.
func withoutDirIDs(t *testing.T, ss []Store) []Store {
	t.Helper()
	out := make([]Store, len(ss))
	for i, s := range ss {
		if st, err := os.Lstat(s.Dir()); err == nil && st.IsDir() && s.DirID.IsZero() {
			t.Errorf("%s: no DirID recorded", s.Path)
		}
		s.DirID = DirID{}
		out[i] = s
	}
	return out
}
