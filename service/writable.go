package service

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/store"
)

// HostFiles name the files that say where users' homes live and where new
// ones are created; "" means the system's own.
type HostFiles struct {
	LoginDefs       string // /etc/login.defs: UID_MIN and UID_MAX, the range of login users
	UseraddDefaults string // /etc/default/useradd: HOME, the base directory of new homes
}

func (h HostFiles) loginDefs() string {
	if h.LoginDefs == "" {
		return "/etc/login.defs"
	}
	return h.LoginDefs
}

func (h HostFiles) useraddDefaults() string {
	if h.UseraddDefaults == "" {
		return "/etc/default/useradd"
	}
	return h.UseraddDefaults
}

// WritablePaths lists what the system unit must be able to write besides
// its StateDirectory and RuntimeDirectory, under ProtectSystem=strict:
//
//   - the directories where homes live, not the homes found today, so a
//     Hermes home created later (a new user, or Hermes installed for an
//     existing one) is writable without a reinstall: the parent of every
//     login user's home in the password database (uid 0, and UID_MIN to
//     UID_MAX of login.defs), and useradd's base for new homes; a home
//     whose parent is a system directory (/, /var, /usr, ...) counts
//     itself instead, so /root is writable but / is not;
//   - every Hermes home discovered now that those do not cover (a system
//     user's, $HERMES_HOME, a configured one), and for a configured home
//     that does not exist yet, its parent, so creating it later works;
//   - the directories of configured stores;
//   - state_dir or the socket's directory when the config moves them away
//     from the defaults.
//
// Homes get a "-" prefix: one removed after install must not keep the
// agent from starting. A moved state or socket directory does not, since
// the agent cannot run without it; Install creates it. Paths are
// resolved (no symlinks) and a path inside another listed one is left
// out.
func WritablePaths(cfg *Config, getenv func(string) string, d store.DiscoverOptions, hf HostFiles) ([]string, []store.Problem) {
	d.ExtraHomes = append(append([]string(nil), d.ExtraHomes...), cfg.Homes...)
	if d.Getenv == nil {
		d.Getenv = getenv
	}
	allUsers := cfg.DiscoverUsers == nil || *cfg.DiscoverUsers
	if !allUsers {
		d.CurrentUserOnly = true
	} else if !d.CurrentUserOnly {
		// The service runs as root and scans every user's home, whoever
		// runs install --print.
		d.AllUsers = true
	}
	var dirs []string
	var problems []store.Problem
	if d.AllUsers {
		bases, ps := homeBases(d.PasswdPath, hf)
		dirs, problems = append(dirs, bases...), append(problems, ps...)
	}
	homes, ps := store.DiscoverHomes(d)
	problems = append(problems, ps...)
	for _, h := range homes {
		dirs = append(dirs, h.Root)
	}
	for _, h := range cfg.Homes {
		if _, err := os.Stat(h); errors.Is(err, fs.ErrNotExist) {
			if p, ok := existingDir(filepath.Dir(filepath.Clean(h))); ok && !systemDir(p) {
				dirs = append(dirs, p)
			}
		}
	}
	for _, s := range cfg.Stores {
		dir := filepath.Dir(s.Path)
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		dirs = append(dirs, dir)
	}
	var out []string
	for _, p := range outermost(dirs) {
		out = append(out, "-"+p)
	}
	seen := map[string]bool{}
	for _, p := range ownDirs(cfg, getenv) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, problems
}

// outermost sorts and dedupes dirs, leaving out any inside another.
func outermost(dirs []string) []string {
	clean := make([]string, 0, len(dirs))
	for _, d := range dirs {
		clean = append(clean, filepath.Clean(d))
	}
	sort.Strings(clean)
	var out []string
	for _, d := range clean {
		if len(out) > 0 && Covers(out[len(out)-1], d) {
			continue
		}
		out = append(out, d)
	}
	return out
}

// Covers reports whether path is dir or inside it.
func Covers(dir, path string) bool {
	dir, path = filepath.Clean(dir), filepath.Clean(path)
	if dir == "/" || dir == path {
		return true
	}
	return strings.HasPrefix(path, dir+"/")
}

// systemTrees are directories agentd must never be able to write: the
// OS's own, and parents too wide to open up for one home beneath them.
var systemTrees = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys", "/usr"}

var tooWide = map[string]bool{"/": true, "/var": true, "/tmp": true, "/var/tmp": true, "/var/lib": true, "/opt": true, "/mnt": true, "/media": true}

func systemDir(p string) bool {
	if tooWide[p] {
		return true
	}
	for _, t := range systemTrees {
		if Covers(t, p) {
			return true
		}
	}
	return false
}

// homeBases are the directories where login users' homes live, and where
// useradd creates new ones.
func homeBases(passwd string, hf HostFiles) ([]string, []store.Problem) {
	if passwd == "" {
		passwd = "/etc/passwd"
	}
	var problems []store.Problem
	uidMin, uidMax := loginUIDRange(hf.loginDefs())
	users, err := readPasswd(passwd)
	if err != nil {
		problems = append(problems, store.Problem{Path: passwd, Err: err,
			Hint: "only the Hermes homes found now are writable for the service"})
	}
	var out []string
	for _, u := range users {
		if u.uid != 0 && (u.uid < uidMin || u.uid > uidMax) {
			continue
		}
		if base, ok := homeBase(u.home); ok {
			out = append(out, base)
		}
	}
	base := useraddHome(hf.useraddDefaults())
	if p, ok := existingDir(base); ok && !systemDir(p) {
		out = append(out, p)
	}
	return out, problems
}

// homeBase is the directory to make writable for a user's home: its
// parent, or the home itself when the parent is a system directory.
func homeBase(home string) (string, bool) {
	home = filepath.Clean(home)
	if real, err := filepath.EvalSymlinks(home); err == nil {
		home = real
	}
	if parent, ok := existingDir(filepath.Dir(home)); ok && !systemDir(parent) {
		return parent, true
	}
	if h, ok := existingDir(home); ok && !systemDir(h) {
		return h, true
	}
	return "", false
}

func existingDir(p string) (string, bool) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", false
	}
	fi, err := os.Stat(real)
	return real, err == nil && fi.IsDir()
}

type passwdUser struct {
	uid  int
	home string
}

// readPasswd reads uid and home of every well-formed passwd(5) line; a
// malformed one is skipped rather than hiding every other user.
func readPasswd(path string) ([]passwdUser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read password database: %w", err)
	}
	defer f.Close()
	var out []passwdUser
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(fields) < 7 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		uid, err := strconv.Atoi(fields[2])
		if err != nil || !filepath.IsAbs(fields[5]) {
			continue
		}
		out = append(out, passwdUser{uid: uid, home: fields[5]})
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("read password database: %w", err)
	}
	return out, nil
}

// loginUIDRange is UID_MIN and UID_MAX from login.defs, with shadow's
// defaults for a missing file or key.
func loginUIDRange(path string) (int, int) {
	lo, hi := 1000, 60000
	for k, v := range keyValues(path, " \t") {
		n, err := strconv.Atoi(v)
		if err != nil {
			continue
		}
		switch k {
		case "UID_MIN":
			lo = n
		case "UID_MAX":
			hi = n
		}
	}
	return lo, hi
}

// useraddHome is useradd's HOME default, /home unless the file says else.
func useraddHome(path string) string {
	if h := keyValues(path, "=")["HOME"]; filepath.IsAbs(h) {
		return filepath.Clean(h)
	}
	return "/home"
}

// keyValues reads "KEY<sep>value" lines, skipping comments; a missing file
// has none.
func keyValues(path, seps string) map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.IndexAny(line, seps)
		if i <= 0 {
			continue
		}
		out[line[:i]] = strings.Trim(strings.TrimSpace(line[i+1:]), `"'`)
	}
	return out
}

// ownDirs are the state and socket directories the config moved away
// from the system unit's StateDirectory and RuntimeDirectory.
func ownDirs(cfg *Config, getenv func(string) string) []string {
	var out []string
	if cfg.StateDir != "" && filepath.Clean(cfg.StateDir) != control.DefaultStateDir(getenv, 0) {
		out = append(out, filepath.Clean(cfg.StateDir))
	}
	if cfg.Socket != "" {
		if dir := filepath.Dir(cfg.Socket); dir != control.DefaultRuntimeDir(getenv, 0) {
			out = append(out, dir)
		}
	}
	return out
}
