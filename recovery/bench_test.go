package recovery

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// BenchmarkReplay measures replay throughput into a store with Hermes'
// FTS5 triggers, on the same machine and rows, three ways:
//
//   - one-tx: stateguard's Replay (parse, recovery ids, prefix match,
//     append with counters), the whole job in one transaction;
//   - per-row: the same records, one commit per appended row, as Hermes
//     does (the baseline; only this benchmark does it);
//   - bulk-insert: the same rows, already built, inserted with one prepared
//     statement in one transaction and nothing else (the floor).
//
// Run: go test -run '^$' -bench BenchmarkReplay -benchtime 1x ./recovery/
func BenchmarkReplay(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		dir := b.TempDir()
		jsonl := benchJSONL(b, dir, n)
		b.Run(fmt.Sprintf("n=%d/one-tx", n), func(b *testing.B) {
			benchReplay(b, dir, jsonl, n, ReplayOptions{})
		})
		b.Run(fmt.Sprintf("n=%d/per-row", n), func(b *testing.B) {
			benchPerRow(b, dir, jsonl, n)
		})
		b.Run(fmt.Sprintf("n=%d/bulk-insert", n), func(b *testing.B) {
			benchBulk(b, dir, jsonl, n)
		})
	}
}

// benchJSONL writes n diverted lines shaped like a real session: user and
// assistant turns of a few hundred bytes, and every fifth turn a tool call
// with its result.
func benchJSONL(b *testing.B, dir string, n int) string {
	b.Helper()
	words := strings.Fields("the quick brown fox jumps over the lazy dog while the agent reads files " +
		"runs tests edits code and explains what it changed in plain words")
	var sb strings.Builder
	for i := 0; i < n; i++ {
		var text strings.Builder
		for j := 0; j < 40; j++ {
			text.WriteString(words[(i*7+j*13)%len(words)])
			text.WriteByte(' ')
		}
		ts := 1732912345.0 + float64(i)*0.25
		switch {
		case i%5 == 3:
			calls := []any{map[string]any{"id": fmt.Sprintf("call_%d", i), "type": "function",
				"function": map[string]any{"name": "read_file", "arguments": `{"path": "/src/main.go"}`}}}
			sb.WriteString(line("role", "assistant", "content", nil, "tool_calls", calls, "timestamp", ts, "finish_reason", "tool_calls"))
		case i%5 == 4:
			sb.WriteString(line("role", "tool", "content", text.String(), "tool_call_id", fmt.Sprintf("call_%d", i-1),
				"tool_name", "read_file", "timestamp", ts))
		case i%2 == 0:
			sb.WriteString(msg("user", text.String(), ts))
		default:
			sb.WriteString(line("role", "assistant", "content", text.String(), "timestamp", ts,
				"finish_reason", "stop", "display_metadata", map[string]any{"model": "m"}))
		}
		sb.WriteByte('\n')
	}
	p := filepath.Join(dir, "bench.jsonl")
	if err := os.WriteFile(p, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	return p
}

func freshStore(b *testing.B, dir string) string {
	b.Helper()
	sub, err := os.MkdirTemp(dir, "store-")
	if err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(sub, "state.db")
	if err := hermestest.CreateStore(p); err != nil {
		b.Fatal(err)
	}
	return p
}

func benchReplay(b *testing.B, dir, jsonl string, n int, opts ReplayOptions) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db := freshStore(b, dir)
		w, err := store.OpenWritable(context.Background(), db)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		rep, err := Replay(context.Background(), w, jsonl, opts)
		b.StopTimer()
		if err != nil || rep.Appended != n {
			b.Fatalf("appended %d: %v", rep.Appended, err)
		}
		w.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

func benchPerRow(b *testing.B, dir, jsonl string, n int) {
	resolved, err := ResolveJSONLPath(jsonl)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db := freshStore(b, dir)
		w, err := store.OpenWritable(context.Background(), db)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		d, err := ParseDivertedFile(resolved)
		if err != nil {
			b.Fatal(err)
		}
		AssignRecoveryIDs(resolved, d.Records)
		err = w.InTx(context.Background(), func(tx *store.Tx) error {
			_, _, err := ensureSession(tx, "bench", nil)
			return err
		})
		now := float64(time.Now().UnixNano()) / 1e9
		for j, r := range d.Records {
			if err != nil {
				break
			}
			err = w.InTx(context.Background(), func(tx *store.Tx) error {
				_, err := tx.AppendMessage(recordMessage("bench", r, now+float64(j)*1e-6))
				return err
			})
		}
		b.StopTimer()
		if err != nil || len(d.Records) != n {
			b.Fatalf("appended %d of %d: %v", len(d.Records), n, err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

func benchBulk(b *testing.B, dir, jsonl string, n int) {
	resolved, err := ResolveJSONLPath(jsonl)
	if err != nil {
		b.Fatal(err)
	}
	d, err := ParseDivertedFile(resolved)
	if err != nil {
		b.Fatal(err)
	}
	AssignRecoveryIDs(resolved, d.Records)
	rows := make([][]any, len(d.Records))
	for i, r := range d.Records {
		m := recordMessage("bench", r, 0)
		rows[i] = []any{m.SessionID, m.Role, m.Content, m.ToolCallID, m.ToolCalls, m.ToolName, m.Timestamp,
			m.FinishReason, m.Observed, m.CompressedSummary, m.Active, m.DisplayMetadata}
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		p := freshStore(b, dir)
		db, err := sql.Open("sqlite", hermestest.DSN(p))
		if err != nil {
			b.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		if _, err := db.Exec(`INSERT INTO sessions(id, source, started_at) VALUES ('bench', 'cli', 1)`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		st, err := tx.Prepare(`INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name,
			timestamp, finish_reason, observed, _compressed_summary, active, display_metadata)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rows {
			if _, err := st.Exec(r...); err != nil {
				b.Fatal(err)
			}
		}
		st.Close()
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		db.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
