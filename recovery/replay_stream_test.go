package recovery

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

func checkedInput(t *testing.T, dir string) ReplayInput {
	t.Helper()
	h, err := store.OpenDir(dir, store.DirID{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	return ReplayInput{ProfileDir: dir, Dir: h.ID()}
}

func modeName(daemon bool) string {
	if daemon {
		return "daemon"
	}
	return "operator"
}

// The daemon's replay (through the checked input) and the operator's
// agentctl replay write exactly the same rows, with the same recovery ids,
// and report the same, a tail of the file first and then all of it.
func TestDaemonAndOperatorReplaysAgree(t *testing.T) {
	lines := []string{
		msg("user", "one", 1000.5),
		`not json`,
		line("role", "assistant", "content", "two", "timestamp", 1001.25, "tool_calls", []any{map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "calc", "arguments": "{}"}}}),
		line("role", "tool", "content", "3", "tool_call_id", "c1", "tool_name", "calc", "timestamp", 1001.5),
		msg("user", "four", 1002),
	}
	daemon, operator := newReplayEnv(t), newReplayEnv(t)
	// One file for both: its path seeds the recovery ids.
	ps := daemon.writeJSONL("s1.jsonl", lines...)
	daemon.w.Close()
	operator.w.Close()
	ctx := context.Background()
	for _, from := range []int{4, 0} { // a tail first, then the whole file
		rd, err := ReplayFile(ctx, daemon.db, ps, ReplayOptions{FromLine: from, Input: checkedInput(t, daemon.dir)})
		if err != nil {
			t.Fatal(err)
		}
		ro, err := ReplayFile(ctx, operator.db, ps, ReplayOptions{FromLine: from})
		if err != nil {
			t.Fatal(err)
		}
		if from == 4 && rd.Appended != 2 {
			t.Fatalf("from line 4: appended %d, want the 2 records of lines 4 and 5", rd.Appended)
		}
		if rd.Appended != ro.Appended || rd.AlreadyPresent != ro.AlreadyPresent || rd.Records != ro.Records ||
			rd.Lines != ro.Lines || len(rd.Issues) != len(ro.Issues) || rd.Path != ro.Path {
			t.Fatalf("from line %d: daemon %+v, operator %+v", from, rd, ro)
		}
	}
	daemon.open()
	operator.open()
	a, b := render(daemon.rows("s1")), render(operator.rows("s1"))
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("rows differ:\ndaemon %q\noperator %q", a, b)
	}
	ia, ib := recoveryIDsOf(t, daemon.rows("s1")), recoveryIDsOf(t, operator.rows("s1"))
	if strings.Join(ia, ",") != strings.Join(ib, ",") {
		t.Fatalf("recovery ids differ: %v vs %v", ia, ib)
	}
}

func recoveryIDsOf(t *testing.T, ms []store.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, rowID(t, m))
	}
	return out
}

// Neither the daemon's replay of a large file nor the operator's holds
// the file in memory: the heap grows by far less than the file's size
// (parsing the whole file first grew it by about 2.5 times the size).
func TestStreamingReplayMemoryIsBounded(t *testing.T) {
	for _, daemon := range []bool{true, false} {
		t.Run(modeName(daemon), func(t *testing.T) {
			e := newReplayEnv(t)
			e.w.Close()
			const lines = 48
			p := filepath.Join(e.dir, "big.jsonl")
			size, err := hermestest.WriteBigJSONL(p, lines, 512<<10)
			if err != nil {
				t.Fatal(err)
			}
			opts := ReplayOptions{SessionID: "big"}
			if daemon {
				opts.Input = checkedInput(t, e.dir)
			}
			var rep ReplayReport
			grew := hermestest.HeapGrowth(func() { rep, err = ReplayFile(context.Background(), e.db, p, opts) })
			if err != nil || rep.Appended != lines {
				t.Fatalf("replay: %+v %v", rep, err)
			}
			t.Logf("file %d bytes, heap grew by at most %d bytes", size, grew)
			if grew > size/2 {
				t.Fatalf("heap grew by %d bytes replaying a %d-byte file: the file is being held in memory", grew, size)
			}
		})
	}
}
