package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Hermes' own guards, as its SessionDB behaves since it learned to detect
// a replaced store (hermes_state.py, hermes_state_dbfile.py), written from
// what that code does:
//
//   - before connecting, it refuses to open a store while any process
//     holds a deleted -wal/-shm of it (refuse_deleted_wal_generation);
//   - it records the main's and the sidecars' (st_dev, st_ino) and the
//     header's application_id, and before every write checks that the
//     path still names them: a new main is StateDbReplacedError, a
//     sidecar that is gone or another inode DeletedWalGenerationError,
//     both sticky for the handle's life;
//   - a lost WAL generation is captured at the first refused write and,
//     failing that, at close (capture_retired_wal_generation, see
//     hermes_capture.go);
//   - a refused message is diverted to <home>/sessions/<session>.jsonl;
//   - a handle that saw either loss never checkpoints at close.

// Hermes' messages, the phrases its classifier keys on kept as they are.
const (
	msgReplaced   = "FATAL: state.db was replaced underneath the gateway; refusing further writes to this file."
	msgDeletedWAL = "FATAL: session storage stopped writing because another Hermes process still holds a deleted state.db-wal or state.db-shm inode (an old copy of the write-ahead log)."
)

type fileIdentity struct{ dev, ino uint64 }

func statIdentity(path string) (fileIdentity, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileIdentity{}, false
	}
	return fileIdentity{uint64(st.Dev), uint64(st.Ino)}, true // Dev is int32 on darwin
}

// hermesGuard is one handle's view of the generation it opened.
type hermesGuard struct {
	db       string
	sessions string // <home>/sessions
	main     fileIdentity
	appID    uint32
	sidecars map[string]fileIdentity // "-wal", "-shm" as recorded

	replaced, walLost bool
	capture           string // the capture taken, once per handle
	capturePause      bool   // test hook: stop inside the capture, as a frozen process would

	// redivert > 0: at the first refusal the last redivert committed
	// messages are diverted too, before the refused one, as Hermes'
	// pending queue still holds a message whose commit reported an
	// error (an I/O error at COMMIT) although it reached the WAL.
	redivert  int
	recent    []divertMsg
	diverting bool
}

type divertMsg struct {
	role, content string
	ts            float64
}

// committed remembers a committed message for redivert.
func (g *hermesGuard) committed(role, content string, ts float64) {
	if g.redivert <= 0 {
		return
	}
	g.recent = append(g.recent, divertMsg{role, content, ts})
	if len(g.recent) > g.redivert {
		g.recent = g.recent[1:]
	}
}

// refused diverts a refused message, after the remembered ones at the
// first refusal.
func (g *hermesGuard) refused(session, role, content string, ts float64) error {
	if !g.diverting {
		g.diverting = true
		for _, m := range g.recent {
			if err := g.divert(session, m.role, m.content, m.ts); err != nil {
				return err
			}
		}
	}
	return g.divert(session, role, content, ts)
}

func newHermesGuard(db string, pause bool) *hermesGuard {
	g := &hermesGuard{db: db, sessions: filepath.Join(filepath.Dir(db), "sessions"), capturePause: pause}
	g.main, _ = statIdentity(db)
	g.appID = readAppID(db)
	g.sidecars = currentSidecars(db)
	return g
}

func currentSidecars(db string) map[string]fileIdentity {
	out := map[string]fileIdentity{}
	for _, s := range []string{"-wal", "-shm"} {
		if id, ok := statIdentity(db + s); ok {
			out[s] = id
		}
	}
	return out
}

// readAppID reads the header's application_id (byte 68, big-endian).
func readAppID(db string) uint32 {
	b := preadPath(db, 0, 72)
	if len(b) < 72 || string(b[:16]) != "SQLite format 3\x00" {
		return 0
	}
	return uint32(b[68])<<24 | uint32(b[69])<<16 | uint32(b[70])<<8 | uint32(b[71])
}

// probeFDs are the fds raw reads of the live main go through, one per
// inode, never closed: closing any fd on the main would cancel every POSIX
// lock this process's SQLite connection holds on it. When the path names
// a new inode a new fd is opened and the old one kept, as Hermes does.
var probeFDs = map[fileIdentity]*os.File{}

func preadPath(path string, off int64, n int) []byte {
	id, ok := statIdentity(path)
	if !ok {
		return nil
	}
	f := probeFDs[id]
	if f == nil {
		var err error
		if f, err = os.Open(path); err != nil {
			return nil
		}
		probeFDs[id] = f // kept even if it is not id: never closed
	}
	b := make([]byte, n)
	m, _ := f.ReadAt(b, off)
	return b[:m]
}

// adopt records the sidecars once they exist: Hermes adopts the current
// generation when none was recorded and its own fds hold no deleted one.
func (g *hermesGuard) adopt() {
	if len(g.sidecars) == 0 && !g.replaced && !g.walLost {
		g.sidecars = currentSidecars(g.db)
	}
	if g.appID == 0 {
		g.appID = readAppID(g.db)
	}
}

// check is Hermes' per-write probe; a non-nil error refuses the write.
func (g *hermesGuard) check() error {
	if !g.replaced && !g.walLost {
		if id, ok := statIdentity(g.db); !ok || id != g.main {
			g.replaced = true
		} else if app := readAppID(g.db); g.appID != 0 && app != 0 && app != g.appID {
			g.replaced = true
		}
	}
	if g.replaced {
		return fmt.Errorf("%s", msgReplaced)
	}
	if !g.walLost && g.sidecarsChanged() {
		g.walLost = true
		if _, err := g.captureOnce("halt"); err != nil {
			fmt.Fprintf(os.Stderr, "writer: could not capture the retired WAL generation of %s at halt: %v; close() retries\n", g.db, err)
		}
	}
	if g.walLost {
		return fmt.Errorf("%s", msgDeletedWAL)
	}
	return nil
}

func (g *hermesGuard) sidecarsChanged() bool {
	for s, want := range g.sidecars {
		if id, ok := statIdentity(g.db + s); !ok || id != want {
			return true
		}
	}
	return false
}

// atClose settles the handle the way Hermes' close() does. It reports
// whether the connection may be closed: a handle that saw its generation
// lost or its file replaced must not run SQLite's close-time checkpoint,
// so it is left open until the process exits (Hermes disables that
// checkpoint with SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, or retains the
// connection unclosed where it cannot).
func (g *hermesGuard) atClose() (closeConn bool) {
	if !g.walLost && len(g.sidecars) > 0 && g.sidecarsChanged() {
		g.walLost = true
	}
	if g.walLost {
		if dir, err := g.captureOnce("close"); err != nil {
			fmt.Fprintf(os.Stderr, "writer: could not capture the retired WAL generation of %s at close: %v\n", g.db, err)
		} else {
			fmt.Fprintf(os.Stderr, "writer: captured the retired WAL generation of %s to %s\n", g.db, dir)
		}
	}
	return !g.walLost && !g.replaced
}

func (g *hermesGuard) captureOnce(trigger string) (string, error) {
	if g.capture != "" {
		return g.capture, nil
	}
	dir, err := captureRetired(g.db, g.sidecars, trigger, g.capturePause)
	if err != nil {
		return "", err
	}
	g.capture = dir
	return dir, nil
}

// divertRecord is one line of sessions/<session>.jsonl, keys in the order
// Hermes writes them (docs/hermes.md, "Diverted JSONL").
type divertRecord struct {
	Role                string   `json:"role"`
	Content             *string  `json:"content"`
	ToolName            *string  `json:"tool_name"`
	ToolCalls           any      `json:"tool_calls"`
	ToolCallID          *string  `json:"tool_call_id"`
	FinishReason        *string  `json:"finish_reason"`
	Reasoning           *string  `json:"reasoning"`
	ReasoningContent    *string  `json:"reasoning_content"`
	ReasoningDetails    any      `json:"reasoning_details"`
	CodexReasoningItems any      `json:"codex_reasoning_items"`
	CodexMessageItems   any      `json:"codex_message_items"`
	CompressedSummary   bool     `json:"_compressed_summary"`
	Timestamp           *float64 `json:"timestamp"`
	APIContent          *string  `json:"api_content"`
	DisplayKind         *string  `json:"display_kind"`
	DisplayMetadata     any      `json:"display_metadata"`
	PlatformMessageID   *string  `json:"platform_message_id"`
}

// divert appends the refused message to sessions/<session>.jsonl, as
// Hermes' transcript diversion does, and fsyncs it before the caller acks.
func (g *hermesGuard) divert(session, role, content string, ts float64) error {
	if err := os.MkdirAll(g.sessions, 0o700); err != nil {
		return fmt.Errorf("divert to %s: %w", g.sessions, err)
	}
	path := filepath.Join(g.sessions, session+".jsonl")
	b, err := json.Marshal(divertRecord{Role: role, Content: &content, Timestamp: &ts})
	if err != nil {
		return err
	}
	// Hermes' json.dumps separators are ", " and ": ".
	line := pySeparators(string(b)) + "\n"
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("divert to %s: %w", path, err)
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		return fmt.Errorf("divert to %s: %w", path, err)
	}
	return f.Sync()
}

// pySeparators turns Go's compact JSON into Python's default separators.
// The contents the writer diverts hold no ',' or ':' inside strings other
// than what MessageContent makes, which has none.
func pySeparators(s string) string {
	var b strings.Builder
	inStr, esc := false, false
	for _, r := range s {
		b.WriteRune(r)
		switch {
		case esc:
			esc = false
		case r == '\\' && inStr:
			esc = true
		case r == '"':
			inStr = !inStr
		case !inStr && (r == ',' || r == ':'):
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// refuseOrExit exits with status 3 and Hermes' message when
// refuseDeletedWAL refuses.
func refuseOrExit(db string) {
	if err := refuseDeletedWAL(db); err != nil {
		fmt.Fprintf(os.Stderr, "writer: %v\n", err)
		os.Exit(3)
	}
}

// refuseDeletedWAL is refuse_deleted_wal_generation: it lists processes
// (this one included) holding a -wal or -shm of db that the path no longer
// names, so a second opener never mints a replacement WAL next to it.
func refuseDeletedWAL(db string) error {
	abs, err := filepath.Abs(db)
	if err != nil {
		return err
	}
	watched := map[string]string{abs + "-wal": abs + "-wal", abs + "-shm": abs + "-shm"}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil // no /proc: Hermes' scan finds nothing either
	}
	var holders []string
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", p.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			fdPath := filepath.Join(fdDir, fd.Name())
			target, err := os.Readlink(fdPath)
			if err != nil || !strings.HasSuffix(target, " (deleted)") {
				continue
			}
			lit, ok := watched[strings.TrimSuffix(target, " (deleted)")]
			if !ok {
				continue
			}
			held, ok1 := statIdentity(fdPath)
			now, ok2 := statIdentity(lit)
			if !ok1 || !ok2 || held != now {
				holders = append(holders, fmt.Sprintf("pid %d (%s)", pid, target))
			}
		}
	}
	if len(holders) == 0 {
		return nil
	}
	return fmt.Errorf("%s Holders: %s", msgDeletedWAL, strings.Join(holders, ", "))
}
