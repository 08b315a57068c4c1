package recovery

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

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

// The streaming replay (the daemon's) writes exactly the rows the whole-
// file replay writes, with the same recovery ids, and is as idempotent.
func TestStreamingReplayMatchesWholeFile(t *testing.T) {
	lines := []string{
		msg("user", "one", 1000.5),
		`not json`,
		line("role", "assistant", "content", "two", "timestamp", 1001.25, "tool_calls", []any{map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "calc", "arguments": "{}"}}}),
		line("role", "tool", "content", "3", "tool_call_id", "c1", "tool_name", "calc", "timestamp", 1001.5),
		msg("user", "four", 1002),
	}
	whole, stream := newReplayEnv(t), newReplayEnv(t)
	// One file for both: its path seeds the recovery ids.
	ps := stream.writeJSONL("s1.jsonl", lines...)
	pw := ps
	stream.w.Close()
	ctx := context.Background()
	for _, from := range []int{4, 0} { // a tail first, then the whole file
		rw, err := Replay(ctx, whole.w, pw, ReplayOptions{FromLine: from})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := ReplayFile(ctx, stream.db, ps, ReplayOptions{FromLine: from, Input: checkedInput(t, stream.dir)})
		if err != nil {
			t.Fatal(err)
		}
		if rw.Appended != rs.Appended || rw.AlreadyPresent != rs.AlreadyPresent || rw.Records != rs.Records ||
			rw.Lines != rs.Lines || len(rw.Issues) != len(rs.Issues) {
			t.Fatalf("from line %d: whole %+v, streaming %+v", from, rw, rs)
		}
	}
	stream.open()
	a, b := render(whole.rows("s1")), render(stream.rows("s1"))
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("rows differ:\nwhole %q\nstream %q", a, b)
	}
	ia, ib := recoveryIDsOf(t, whole.rows("s1")), recoveryIDsOf(t, stream.rows("s1"))
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

// The daemon's replay of a large file does not hold the file in memory:
// the agent's heap grows by far less than the file's size.
func TestStreamingReplayMemoryIsBounded(t *testing.T) {
	e := newReplayEnv(t)
	e.w.Close()
	const lines, lineSize = 48, 512 << 10
	p := filepath.Join(e.dir, "big.jsonl")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	word := strings.Repeat("x", 63) + " "
	body := strings.Repeat(word, lineSize/len(word))
	for i := range lines {
		if _, err := f.WriteString(msg("user", body+strconv.Itoa(i), 1000+float64(i)) + "\n"); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)

	// Collect eagerly, so the heap measured is close to what is live.
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	done := make(chan struct{})
	go func() {
		var m runtime.MemStats
		for {
			select {
			case <-done:
				return
			default:
			}
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			runtime.Gosched()
		}
	}()
	// The whole-file replay (an operator's) grows it by about 2.5 times
	// the file's size; this one by about ten lines' worth.
	rep, err := ReplayFile(context.Background(), e.db, p, ReplayOptions{SessionID: "big", Input: checkedInput(t, e.dir)})
	close(done)
	if err != nil || rep.Appended != lines {
		t.Fatalf("replay: %+v %v", rep, err)
	}
	grew := int64(peak.Load()) - int64(base)
	t.Logf("file %d bytes, heap grew by at most %d bytes", fi.Size(), grew)
	if grew > fi.Size()/2 {
		t.Fatalf("heap grew by %d bytes replaying a %d-byte file: the file is being held in memory", grew, fi.Size())
	}
}
