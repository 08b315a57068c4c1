package recovery

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// FromLine replays only the later lines, with the ids the whole file
// gives them, so a replay of the whole file afterwards adds only the
// earlier lines and duplicates nothing.
func TestReplayFromLine(t *testing.T) {
	db := hermestest.NewStore(t)
	dir := filepath.Dir(db)
	jsonl := filepath.Join(dir, "s1.jsonl")
	lines := `{"role": "user", "content": "one", "timestamp": 1.5}
{"role": "assistant", "content": "two", "timestamp": 2.5}
{"role": "user", "content": "three", "timestamp": 3.5}
`
	if err := os.WriteFile(jsonl, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rep, err := ReplayFile(ctx, db, jsonl, ReplayOptions{FromLine: 2})
	if err != nil || rep.Appended != 2 {
		t.Fatalf("from line 2: appended %d, %v", rep.Appended, err)
	}
	rep, err = ReplayFile(ctx, db, jsonl, ReplayOptions{FromLine: 2})
	if err != nil || rep.Appended != 0 {
		t.Fatalf("again: appended %d, %v", rep.Appended, err)
	}
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := store.ReadMessages(ctx, ro, "s1")
	ro.Close()
	if err != nil || len(msgs) != 2 || msgs[0].Content.String != "two" {
		t.Fatalf("rows after FromLine: %+v %v", msgs, err)
	}
}
