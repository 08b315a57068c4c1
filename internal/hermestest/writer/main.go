// Command writer is the live writer of stateguard's tests and benchmarks: it
// behaves like a Hermes gateway writing one session (WAL mode, busy_timeout,
// BEGIN IMMEDIATE for every write, a PASSIVE checkpoint every 50 writes) and
// appends one line per acknowledged message to an ack file, after the
// commit has returned. The ack file is the ground truth of what a client
// was told had been saved.
//
// Ack lines are tab-separated: session, seq, timestamp, message id. On
// start the writer continues after the highest seq already acknowledged for
// its session, so a writer restarted by a service manager (or a chaos run)
// never reuses a seq.
//
// It prints "ready <pid>" on stdout after its first acknowledged commit, so
// -wal and -shm exist when a test starts looking. SIGTERM and SIGINT end it
// cleanly after the current commit, closing the connection as Hermes does.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/stateguard/stateguard/internal/hermestest"
)

type options struct {
	db              string
	session         string
	source          string
	rate            float64
	count           int
	ack             string
	create          bool
	checkpointEvery int
	autoCheckpoint  int
	cancelLocks     int
	linger          bool
	toolEvery       int
	nondumpable     bool
	vacuumInto      string
	hermesGuards    bool
	capturePause    bool
	maintenance     string
	redivert        int
}

func main() {
	var o options
	flag.StringVar(&o.db, "db", "", "path of state.db (required)")
	flag.StringVar(&o.session, "session", "s1", "session id to append to")
	flag.StringVar(&o.source, "source", "cli", "sessions.source of a created session")
	flag.Float64Var(&o.rate, "rate", 0, "messages per second; 0 writes as fast as it can")
	flag.IntVar(&o.count, "count", 0, "stop after this many messages; 0 runs until signalled")
	flag.StringVar(&o.ack, "ack", "", "ack file to append acknowledged messages to")
	flag.BoolVar(&o.create, "create", false, "create the Hermes schema if the store has none")
	flag.IntVar(&o.checkpointEvery, "checkpoint-every", 50, "PASSIVE checkpoint every N writes; 0 never")
	flag.IntVar(&o.autoCheckpoint, "autocheckpoint", -1, "SQLite's wal_autocheckpoint in pages; 0 never, -1 SQLite's default (1000)")
	flag.IntVar(&o.cancelLocks, "cancel-locks-every", 0, "every N commits open and close state.db, cancelling this process's POSIX locks (the SQLite pitfall); 0 never")
	flag.BoolVar(&o.linger, "linger", false, "after -count messages keep the connection open until signalled")
	flag.IntVar(&o.toolEvery, "tool-every", 0, "every Nth message is an assistant tool call followed by its tool result; 0 never")
	flag.BoolVar(&o.nondumpable, "nondumpable", false, "prctl(PR_SET_DUMPABLE, 0) first: even its own user cannot read its fds (Linux)")
	flag.StringVar(&o.vacuumInto, "vacuum-into", "", "write no message: VACUUM INTO this path (a backup taken from a process of its own) and exit")
	flag.BoolVar(&o.hermesGuards, "hermes-guards", false, "behave like Hermes' own SessionDB guards: refuse to open next to a deleted WAL, refuse writes to a replaced store or a lost WAL generation (diverting them to sessions/<session>.jsonl, acked with id -1), capture the lost generation at halt or close")
	flag.BoolVar(&o.capturePause, "hermes-capture-pause", false, "with -hermes-guards: stop inside the capture, after its .partial directory and an empty state.db-wal.part exist")
	flag.IntVar(&o.redivert, "hermes-redivert", 0, "with -hermes-guards: at the first refusal also divert the last N committed messages (a commit that reported an error but reached the WAL)")
	flag.StringVar(&o.maintenance, "maintenance", "", "write no message: run one of Hermes' maintenance operations (vacuum, journal-delete, journal-wal, restore:<backup>) and exit")
	flag.Parse()
	if o.db == "" {
		fmt.Fprintln(os.Stderr, "writer: -db is required")
		os.Exit(2)
	}
	if o.vacuumInto != "" {
		if err := vacuumInto(o.db, o.vacuumInto); err != nil {
			fmt.Fprintf(os.Stderr, "writer: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if o.maintenance != "" {
		if err := maintain(o.db, o.maintenance); err != nil {
			fmt.Fprintf(os.Stderr, "writer: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if o.nondumpable {
		if err := setNondumpable(); err != nil {
			fmt.Fprintf(os.Stderr, "writer: %v\n", err)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "writer: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.hermesGuards {
		refuseOrExit(o.db)
	}
	dsn := hermestest.DSN(o.db)
	if o.autoCheckpoint >= 0 {
		dsn += fmt.Sprintf("&_pragma=wal_autocheckpoint(%d)", o.autoCheckpoint)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return fmt.Errorf("open %s: %w", o.db, err)
	}
	// One connection, like a Hermes gateway's single writer thread: the
	// lock-cancel pitfall and the checkpoint cadence are per connection.
	db.SetMaxOpenConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	var guard *hermesGuard
	defer func() {
		if guard == nil || guard.atClose() {
			db.Close()
		}
	}()

	seq, err := prepare(ctx, db, o)
	if err != nil {
		return err
	}
	if o.hermesGuards {
		guard = newHermesGuard(o.db, o.capturePause)
		guard.redivert = o.redivert
	}
	ack, err := openAck(o.ack)
	if err != nil {
		return err
	}
	if ack != nil {
		defer ack.Close()
	}

	var interval time.Duration
	if o.rate > 0 {
		interval = time.Duration(float64(time.Second) / o.rate)
	}
	next := time.Now()
	written := 0
	for o.count == 0 || written < o.count {
		if ctx.Err() != nil {
			return nil
		}
		if !waitTurn(ctx, &next, interval) {
			return nil
		}
		seq++
		ts := float64(time.Now().UnixNano()) / 1e9
		id, err := saveMessage(ctx, db, guard, o, seq, ts)
		if err != nil {
			return fmt.Errorf("append seq %d: %w", seq, err)
		}
		written++
		if ack != nil {
			line := fmt.Sprintf("%s\t%d\t%s\t%d\n", o.session, seq, strconv.FormatFloat(ts, 'f', -1, 64), id)
			if _, err := ack.WriteString(line); err != nil {
				return fmt.Errorf("write ack: %w", err)
			}
		}
		if written == 1 {
			fmt.Printf("ready %d\n", os.Getpid())
		}
		if o.checkpointEvery > 0 && written%o.checkpointEvery == 0 {
			// Errors are ignored as Hermes ignores them: a PASSIVE
			// checkpoint that cannot run now runs later.
			_, _ = db.Exec("PRAGMA wal_checkpoint(PASSIVE)")
		}
		if o.cancelLocks > 0 && written%o.cancelLocks == 0 {
			cancelPOSIXLocks(o.db)
		}
	}
	if o.linger {
		<-ctx.Done()
	}
	return nil
}

// prepare creates the schema when asked and the session, and returns the
// last seq already acknowledged.
func prepare(ctx context.Context, db *sql.DB, o options) (int64, error) {
	if o.create {
		if err := retryBusy(ctx, func() error { return hermestest.InitSchema(db) }); err != nil {
			return 0, err
		}
	}
	seq, err := lastSeq(o.ack, o.session)
	if err != nil {
		return 0, err
	}
	if err := retryBusy(ctx, func() error { return ensureSession(db, o) }); err != nil {
		return 0, fmt.Errorf("create session %s: %w", o.session, err)
	}
	return seq, nil
}

// openAck opens the ack file for appending; nil when there is none.
func openAck(path string) (*os.File, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open ack file %s: %w", path, err)
	}
	return f, nil
}

// waitTurn paces the loop at interval (0: no pacing); false when ctx ends.
func waitTurn(ctx context.Context, next *time.Time, interval time.Duration) bool {
	if interval <= 0 {
		return true
	}
	if d := time.Until(*next); d > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
		}
	}
	*next = next.Add(interval)
	return true
}

// saveMessage commits message seq, or, when Hermes' guard refuses the
// write, diverts it and returns id -1: saved to the diverted transcript,
// which agentd (or Hermes' import) replays.
func saveMessage(ctx context.Context, db *sql.DB, guard *hermesGuard, o options, seq int64, ts float64) (int64, error) {
	content := hermestest.MessageContent(o.session, seq)
	if guard != nil {
		guard.adopt()
		if refused := guard.check(); refused != nil {
			return -1, guard.refused(o.session, roleOf(seq), content, ts)
		}
	}
	toolTurn := o.toolEvery > 0 && seq%int64(o.toolEvery) == 0
	var id int64
	err := retryBusy(ctx, func() error {
		var err error
		id, err = appendMessage(db, o.session, seq, ts, toolTurn)
		return err
	})
	if err == nil && guard != nil && !toolTurn {
		guard.committed(roleOf(seq), content, ts)
	}
	return id, err
}

// vacuumInto copies the store at db to dst with VACUUM INTO, as an
// operator's backup tool in a process of its own does.
func vacuumInto(db, dst string) error {
	c, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return fmt.Errorf("open %s: %w", db, err)
	}
	defer c.Close()
	if _, err := c.Exec("VACUUM INTO ?", dst); err != nil {
		return fmt.Errorf("VACUUM INTO %s: %w", dst, err)
	}
	return nil
}

func ensureSession(db *sql.DB, o options) error {
	_, err := db.Exec(`INSERT OR IGNORE INTO sessions (id, source, model, started_at, profile_name)
		VALUES (?, ?, 'test-model', ?, 'test')`, o.session, o.source, float64(time.Now().UnixNano())/1e9)
	return err
}

// appendMessage commits one message (or a tool call and its result) the
// way Hermes does: BEGIN IMMEDIATE, insert, bump the session counters.
func appendMessage(db *sql.DB, session string, seq int64, ts float64, toolTurn bool) (int64, error) {
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, err
	}
	rollback := func(err error) (int64, error) {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		return 0, err
	}
	role := roleOf(seq)
	content := hermestest.MessageContent(session, seq)
	var res sql.Result
	toolCalls := 0
	if toolTurn {
		callID := fmt.Sprintf("call_%s_%d", session, seq)
		calls := fmt.Sprintf(`[{"id": %q, "type": "function", "function": {"name": "calc", "arguments": "{}"}}]`, callID)
		if _, err := conn.ExecContext(ctx, `INSERT INTO messages (session_id, role, content, tool_calls, timestamp, finish_reason)
			VALUES (?, 'assistant', NULL, ?, ?, 'tool_calls')`, session, calls, ts); err != nil {
			return rollback(err)
		}
		res, err = conn.ExecContext(ctx, `INSERT INTO messages (session_id, role, content, tool_call_id, tool_name, timestamp)
			VALUES (?, 'tool', ?, ?, 'calc', ?)`, session, content, callID, ts)
		toolCalls = 1
	} else {
		res, err = conn.ExecContext(ctx, `INSERT INTO messages (session_id, role, content, timestamp)
			VALUES (?, ?, ?, ?)`, session, role, content, ts)
	}
	if err != nil {
		return rollback(err)
	}
	n := 1
	if toolTurn {
		n = 2
	}
	if _, err := conn.ExecContext(ctx, `UPDATE sessions SET message_count = message_count + ?,
		tool_call_count = tool_call_count + ? WHERE id = ?`, n, toolCalls, session); err != nil {
		return rollback(err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return rollback(err)
	}
	return res.LastInsertId()
}

func roleOf(seq int64) string {
	if seq%2 == 0 {
		return "assistant"
	}
	return "user"
}

// retryBusy retries f on SQLITE_BUSY/LOCKED with jitter, like Hermes' own
// retry loop around its 1 s busy_timeout, for up to ~20 s.
func retryBusy(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := f()
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(20+rand.IntN(80)) * time.Millisecond):
		}
	}
}

func isBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code() & 0xff
		return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
	}
	return false
}

// cancelPOSIXLocks opens and closes the database file: close() drops every
// POSIX lock this process holds on the inode, including SQLite's own, which
// is how a real process comes to believe it is the last connection.
func cancelPOSIXLocks(path string) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err == nil {
		_ = syscall.Close(fd)
	}
}

// lastSeq returns the highest seq acknowledged for session in the ack file.
func lastSeq(path, session string) (int64, error) {
	if path == "" {
		return 0, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read ack file: %w", err)
	}
	defer f.Close()
	var last int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) < 2 || fields[0] != session {
			continue
		}
		if n, err := strconv.ParseInt(fields[1], 10, 64); err == nil && n > last {
			last = n
		}
	}
	return last, sc.Err()
}
