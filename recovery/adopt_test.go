//go:build linux

package recovery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

func ns(s string) sql.NullString   { return sql.NullString{String: s, Valid: true} }
func nf(f float64) sql.NullFloat64 { return sql.NullFloat64{Float64: f, Valid: true} }
func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// adoptFixture is a Hermes home: the default store (the donor) holds a
// compression lineage sA <- sB <- sC created there by mistake, and an
// unrelated session sX with the same title as sC; the profile "work"
// (the recipient) holds r1, also with that title.
type adoptFixture struct {
	donor, recipient string
}

func newAdoptFixture(t *testing.T) *adoptFixture {
	t.Helper()
	home, err := filepath.EvalSymlinks(t.TempDir())
	noErr(t, err)
	f := &adoptFixture{donor: filepath.Join(home, "state.db"), recipient: filepath.Join(home, "profiles", "work", "state.db")}
	noErr(t, hermestest.CreateStore(f.donor))
	noErr(t, os.MkdirAll(filepath.Dir(f.recipient), 0o700))
	noErr(t, hermestest.CreateStore(f.recipient))
	ctx := context.Background()
	w, err := store.OpenWritable(ctx, f.donor)
	noErr(t, err)
	defer w.Close()
	noErr(t, w.InTx(ctx, func(tx *store.Tx) error {
		sessions := []store.Session{
			{ID: "sA", Source: "cli", Model: ns("m1"), Title: ns("Trip planning"), StartedAt: nf(1000), EndedAt: nf(1100), EndReason: ns("compressed")},
			{ID: "sB", Source: "cli", Model: ns("m1"), Title: ns("Trip planning"), ParentSessionID: ns("sA"), StartedAt: nf(1100), EndedAt: nf(1200), EndReason: ns("compressed")},
			{ID: "sC", Source: "cli", Model: ns("m1"), Title: ns("Trip planning #3"), ParentSessionID: ns("sB"), StartedAt: nf(1200)},
			{ID: "sX", Source: "cli", Title: ns("Trip planning #3"), StartedAt: nf(900)},
		}
		for _, s := range sessions {
			if err := tx.CreateSession(s); err != nil {
				return err
			}
		}
		for _, sid := range []string{"sA", "sB", "sC", "sX"} {
			for i := range 3 {
				ts := 1000 + float64(i)
				if _, err := tx.AppendMessage(store.Message{SessionID: sid, Role: "user", Content: ns(fmt.Sprintf("%s question %d about lisbon", sid, i)), Timestamp: nf(ts)}); err != nil {
					return err
				}
			}
			calls := fmt.Sprintf(`[{"id": "call_%s", "type": "function", "function": {"name": "search", "arguments": "{}"}}]`, sid)
			if _, err := tx.AppendMessage(store.Message{SessionID: sid, Role: "assistant", ToolCalls: ns(calls), FinishReason: ns("tool_calls"), Timestamp: nf(1010)}); err != nil {
				return err
			}
			if _, err := tx.AppendMessage(store.Message{SessionID: sid, Role: "tool", Content: ns("results for " + sid), ToolCallID: ns("call_" + sid), ToolName: ns("search"), Timestamp: nf(1011)}); err != nil {
				return err
			}
		}
		return nil
	}))
	r, err := store.OpenWritable(ctx, f.recipient)
	noErr(t, err)
	defer r.Close()
	noErr(t, r.InTx(ctx, func(tx *store.Tx) error {
		if err := tx.CreateSession(store.Session{ID: "r1", Source: "cli", Title: ns("Trip planning #3"), StartedAt: nf(500)}); err != nil {
			return err
		}
		_, err := tx.AppendMessage(store.Message{SessionID: "r1", Role: "user", Content: ns("recipient's own"), Timestamp: nf(500)})
		return err
	}))
	return f
}

// readID is read(id) on a read-only connection to db, closed again after.
func readID[T any](t *testing.T, db, id string, read func(context.Context, store.Querier, string) (T, error)) T {
	t.Helper()
	c, err := store.OpenReadOnly(db)
	noErr(t, err)
	defer c.Close()
	v, err := read(context.Background(), c, id)
	noErr(t, err)
	return v
}

func sessionRow(t *testing.T, db, id string) store.Session {
	t.Helper()
	return readID(t, db, id, store.ReadSession)
}

func messagesOf(t *testing.T, db, id string) []store.Message {
	t.Helper()
	return readID(t, db, id, store.ReadMessages)
}

func hasSession(t *testing.T, db, id string) bool {
	t.Helper()
	return readID(t, db, id, store.SessionExists)
}

func TestAdoptLineage(t *testing.T) {
	f := newAdoptFixture(t)
	ctx := context.Background()
	donorBefore := map[string][]store.Message{}
	for _, id := range []string{"sA", "sB", "sC", "sX"} {
		donorBefore[id] = messagesOf(t, f.donor, id)
	}
	rep, err := Adopt(ctx, AdoptRequest{Donor: f.donor, Recipient: f.recipient, Session: "sC"})
	noErr(t, err)
	if len(rep.Segments) != 3 || rep.Segments[0].ID != "sA" || rep.Segments[2].ID != "sC" || !rep.DonorRetired || rep.Partial() {
		t.Fatalf("report = %+v", rep)
	}
	for _, s := range rep.Segments {
		if s.Status != SegmentAdopted || !s.SessionCreated || s.Imported != 5 || s.AdoptedMessages != 5 || !s.DonorRetired || s.DonorMessagesLive != 5 {
			t.Fatalf("segment %+v", s)
		}
		got := messagesOf(t, f.recipient, s.ID)
		want := donorBefore[s.ID]
		if len(got) != len(want) {
			t.Fatalf("%s: %d messages adopted, donor had %d", s.ID, len(got), len(want))
		}
		for i := range got {
			if !sameMessage(got[i], want[i]) || got[i].FinishReason != want[i].FinishReason {
				t.Fatalf("%s message %d: %+v, donor %+v", s.ID, i, got[i], want[i])
			}
			if !got[i].DisplayOrder.Valid || got[i].DisplayOrder.Int64 != got[i].ID {
				t.Fatalf("%s message %d: display_order %v for id %d: the recipient's trigger should have set it", s.ID, i, got[i].DisplayOrder, got[i].ID)
			}
		}
		rs, ds := sessionRow(t, f.recipient, s.ID), sessionRow(t, f.donor, s.ID)
		if rs.Title != ds.Title || rs.ParentSessionID != ds.ParentSessionID || rs.Model != ds.Model || rs.StartedAt != ds.StartedAt ||
			rs.MessageCount.Int64 != 5 || rs.ToolCallCount.Int64 != 1 || rs.Archived.Int64 != 0 {
			t.Fatalf("%s: recipient row %+v, donor %+v", s.ID, rs, ds)
		}
		if ds.Archived.Int64 != 1 || ds.EndReason.String != EndReasonAdopted || !ds.EndedAt.Valid {
			t.Fatalf("%s: donor not retired: %+v", s.ID, ds)
		}
		if n := len(messagesOf(t, f.donor, s.ID)); n != 5 {
			t.Fatalf("%s: donor has %d messages after retiring; rows are never deleted", s.ID, n)
		}
	}
	if sessionRow(t, f.donor, "sB").EndedAt.Float64 != 1200 {
		t.Fatal("a donor's ended_at was overwritten")
	}
	// Titles collide; only ids count.
	if sx := sessionRow(t, f.donor, "sX"); sx.Archived.Int64 != 0 || sx.EndReason.Valid || hasSession(t, f.recipient, "sX") {
		t.Fatalf("sX (same title, other id) was touched: %+v", sx)
	}
	if n := len(messagesOf(t, f.recipient, "r1")); n != 1 {
		t.Fatalf("recipient's own session r1 changed: %d messages", n)
	}
	// The FTS triggers fired for the adopted rows.
	c, err := store.OpenReadOnly(f.recipient)
	noErr(t, err)
	var hits int
	noErr(t, c.QueryRow("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'lisbon'").Scan(&hits))
	c.Close()
	if hits != 9 {
		t.Fatalf("messages_fts finds %d adopted rows, want 9", hits)
	}

	// Idempotent: a second run changes nothing.
	rep2, err := Adopt(ctx, AdoptRequest{Donor: f.donor, Recipient: f.recipient, Session: "sC"})
	noErr(t, err)
	for _, s := range rep2.Segments {
		if s.Status != SegmentAlreadyAdopted || s.Imported != 0 || !s.DonorRetired {
			t.Fatalf("second run segment %+v", s)
		}
	}
	if !rep2.DonorRetired || rep2.Partial() {
		t.Fatalf("second run %+v", rep2)
	}
	for _, id := range []string{"sA", "sB", "sC"} {
		if n := len(messagesOf(t, f.recipient, id)); n != 5 {
			t.Fatalf("second run: %s has %d messages", id, n)
		}
	}
}

// A writer appends to the donor after the import and before the
// retirement: that segment is not retired, donor_retired is false; the
// next run takes the new row and retires it.
func TestAdoptDonorGrowsBeforeRetire(t *testing.T) {
	f := newAdoptFixture(t)
	ctx := context.Background()
	rep, err := Adopt(ctx, AdoptRequest{Donor: f.donor, Recipient: f.recipient, Session: "sC",
		BeforeRetire: func(segs []string) {
			if strings.Join(segs, ",") != "sA,sB,sC" {
				t.Errorf("retiring %v", segs)
			}
			w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: f.donor, Session: "sC", Count: 1})
			<-w.Done()
		}})
	noErr(t, err)
	if rep.DonorRetired || !rep.Partial() {
		t.Fatalf("report %+v: donor_retired must be false", rep)
	}
	c := rep.Segments[2]
	if c.ID != "sC" || c.DonorRetired || c.DonorMessagesLive != 6 || c.AdoptedMessages != 5 || !strings.Contains(c.Reason, "appended since the export") {
		t.Fatalf("sC: %+v", c)
	}
	if !rep.Segments[0].DonorRetired || !rep.Segments[1].DonorRetired {
		t.Fatalf("the other segments were not retired: %+v", rep.Segments)
	}
	if s := sessionRow(t, f.donor, "sC"); s.Archived.Int64 != 0 || s.EndReason.Valid {
		t.Fatalf("a donor that is ahead was retired: %+v", s)
	}

	rep2, err := Adopt(ctx, AdoptRequest{Donor: f.donor, Recipient: f.recipient, Session: "sC"})
	noErr(t, err)
	c = rep2.Segments[2]
	if c.Status != SegmentAdopted || c.SessionCreated || c.Imported != 1 || !c.DonorRetired || !rep2.DonorRetired {
		t.Fatalf("second run: %+v", rep2)
	}
	got := messagesOf(t, f.recipient, "sC")
	if len(got) != 6 || got[5].Content.String != hermestest.MessageContent("sC", 1) {
		t.Fatalf("recipient sC: %d messages, last %q", len(got), got[len(got)-1].Content.String)
	}
}

func TestAdoptArchivedDonorNeverAdopted(t *testing.T) {
	f := newAdoptFixture(t)
	ctx := context.Background()
	w, err := store.OpenWritable(ctx, f.donor)
	noErr(t, err)
	noErr(t, w.InTx(ctx, func(tx *store.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE sessions SET archived = 1, end_reason = 'agent_close' WHERE id = 'sB'")
		return err
	}))
	w.Close()
	rep, err := Adopt(ctx, AdoptRequest{Donor: f.donor, Recipient: f.recipient, Session: "sC"})
	noErr(t, err)
	b := rep.Segments[1]
	if b.ID != "sB" || b.Status != SegmentArchived || b.Imported != 0 || b.DonorRetired || !rep.Partial() || rep.DonorRetired {
		t.Fatalf("report %+v", rep)
	}
	if hasSession(t, f.recipient, "sB") {
		t.Fatal("an archived donor was adopted")
	}
	if s := sessionRow(t, f.donor, "sB"); s.EndReason.String != "agent_close" {
		t.Fatalf("archived donor changed: %+v", s)
	}
	if !rep.Segments[0].DonorRetired || !rep.Segments[2].DonorRetired {
		t.Fatalf("the other segments: %+v", rep.Segments)
	}
}

func TestAdoptKeepDonor(t *testing.T) {
	f := newAdoptFixture(t)
	ctx := context.Background()
	for run := range 2 {
		rep, err := Adopt(ctx, AdoptRequest{Donor: f.donor, Recipient: f.recipient, Session: "sB", KeepDonor: true})
		noErr(t, err)
		want := 5
		if run == 1 {
			want = 0
		}
		if len(rep.Segments) != 2 || rep.DonorRetired || rep.Partial() || rep.Segments[1].Imported != want {
			t.Fatalf("run %d: %+v", run, rep)
		}
	}
	if s := sessionRow(t, f.donor, "sB"); s.Archived.Int64 != 0 {
		t.Fatal("--keep-donor retired the donor")
	}
}

func TestAdoptConflict(t *testing.T) {
	f := newAdoptFixture(t)
	ctx := context.Background()
	r, err := store.OpenWritable(ctx, f.recipient)
	noErr(t, err)
	noErr(t, r.InTx(ctx, func(tx *store.Tx) error {
		if err := tx.CreateSession(store.Session{ID: "sA", Source: "cli"}); err != nil {
			return err
		}
		_, err := tx.AppendMessage(store.Message{SessionID: "sA", Role: "user", Content: ns("something else entirely"), Timestamp: nf(1)})
		return err
	}))
	r.Close()
	rep, err := Adopt(ctx, AdoptRequest{Donor: f.donor, Recipient: f.recipient, Session: "sA"})
	noErr(t, err)
	if s := rep.Segments[0]; s.Status != SegmentConflict || s.DonorRetired || s.Imported != 0 || !rep.Partial() {
		t.Fatalf("report %+v", rep)
	}
	if sessionRow(t, f.donor, "sA").Archived.Int64 != 0 {
		t.Fatal("a conflicting donor was retired")
	}
}

func TestAdoptUnknownSession(t *testing.T) {
	f := newAdoptFixture(t)
	_, err := Adopt(context.Background(), AdoptRequest{Donor: f.donor, Recipient: f.recipient, Session: "Trip planning #3"})
	if !errors.Is(err, store.ErrNoSession) || !strings.Contains(err.Error(), "matched exactly") {
		t.Fatalf("got %v", err)
	}
}

// A v31 donor into a v30 recipient: the uid columns the recipient lacks
// are dropped and reported, the rest imported.
func TestAdoptV31IntoV30(t *testing.T) {
	f := newAdoptFixture(t)
	ctx := context.Background()
	hermestest.ExecSQL(t, f.donor, hermestest.SchemaV31Extra+"UPDATE messages SET message_uid = 'uid-' || id WHERE session_id = 'sA';")
	rep, err := Adopt(ctx, AdoptRequest{Donor: f.donor, Recipient: f.recipient, Session: "sA"})
	noErr(t, err)
	if s := rep.Segments[0]; s.Imported != 5 || strings.Join(s.DroppedColumns, ",") != "message_uid" || !s.DonorRetired {
		t.Fatalf("segment %+v", s)
	}
}

// Look-ups of many ids go in chunks of at most 999 bound variables: on a
// connection capped at 999 (as SQLite builds before 3.32 are) a query
// with 1000 fails, and the chunked look-ups still answer for 2500 ids.
func TestBatchLookupsChunked(t *testing.T) {
	f := newAdoptFixture(t)
	ctx := context.Background()
	w, err := store.OpenWritable(ctx, f.donor)
	noErr(t, err)
	var ids []string
	noErr(t, w.InTx(ctx, func(tx *store.Tx) error {
		for i := range 2500 {
			id := fmt.Sprintf("bulk-%04d", i)
			ids = append(ids, id)
			if err := tx.CreateSession(store.Session{ID: id, Source: "cli", StartedAt: nf(1)}); err != nil {
				return err
			}
			if i%7 == 0 {
				if _, err := tx.AppendMessage(store.Message{SessionID: id, Role: "user", Content: ns("x"), Timestamp: nf(1)}); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	w.Close()
	db, err := store.OpenReadOnly(f.donor)
	noErr(t, err)
	defer db.Close()
	conn, err := db.Conn(ctx)
	noErr(t, err)
	defer conn.Close()
	if _, err := sqlite.Limit(conn, sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999); err != nil {
		t.Fatal(err)
	}
	args := stringArgs(ids[:1000])
	if _, err := conn.QueryContext(ctx, "SELECT id FROM sessions WHERE id IN ("+placeholderList(1000)+")", args...); err == nil {
		t.Fatal("1000 variables passed on a connection capped at 999: the test cannot tell chunking from none")
	}
	probe := append(append([]string{}, ids...), "absent-1", "absent-2")
	found, err := existingSessions(ctx, conn, probe)
	noErr(t, err)
	if len(found) != 2500 || found["absent-1"] {
		t.Fatalf("found %d sessions", len(found))
	}
	counts, err := messageCounts(ctx, conn, probe)
	noErr(t, err)
	if len(counts) != (2500+6)/7 || counts["bulk-0007"] != 1 || counts["bulk-0001"] != 0 {
		t.Fatalf("counts: %d sessions with messages", len(counts))
	}
}

// A lineage longer than one chunk of ids goes through whole.
func TestAdoptLongLineage(t *testing.T) {
	f := newAdoptFixture(t)
	ctx := context.Background()
	const n = 1100
	w, err := store.OpenWritable(ctx, f.donor)
	noErr(t, err)
	noErr(t, w.InTx(ctx, func(tx *store.Tx) error {
		for i := range n {
			s := store.Session{ID: fmt.Sprintf("seg-%04d", i), Source: "cli", StartedAt: nf(float64(i))}
			if i > 0 {
				s.ParentSessionID = ns(fmt.Sprintf("seg-%04d", i-1))
			}
			if err := tx.CreateSession(s); err != nil {
				return err
			}
			if _, err := tx.AppendMessage(store.Message{SessionID: s.ID, Role: "user", Content: ns("turn"), Timestamp: nf(float64(i))}); err != nil {
				return err
			}
		}
		return nil
	}))
	w.Close()
	rep, err := Adopt(ctx, AdoptRequest{Donor: f.donor, Recipient: f.recipient, Session: fmt.Sprintf("seg-%04d", n-1)})
	noErr(t, err)
	if len(rep.Segments) != n || !rep.DonorRetired || rep.Partial() {
		t.Fatalf("%d segments, donor_retired %v", len(rep.Segments), rep.DonorRetired)
	}
	if got := rowCounts(t, f.recipient); got.Sessions != n+1 || got.Messages != n+1 {
		t.Fatalf("recipient holds %v", got)
	}
}

// Adopt opens both stores through handles on the directories the CLI
// resolved: a recipient profile directory renamed away and replaced by a
// look-alike (holding another store) after the resolution is refused,
// nothing is imported into either, and the donor is not retired.
func TestAdoptRefusesSwappedProfileDir(t *testing.T) {
	f := newAdoptFixture(t)
	ctx := context.Background()
	donor, err := store.ResolveStore(f.donor)
	noErr(t, err)
	recipient, err := store.ResolveStore(f.recipient)
	noErr(t, err)
	dir := filepath.Dir(f.recipient)
	noErr(t, os.Rename(dir, dir+".aside"))
	noErr(t, os.Mkdir(dir, 0o700))
	noErr(t, hermestest.CreateStore(f.recipient))
	_, err = Adopt(ctx, AdoptRequest{Donor: donor.Path, Recipient: recipient.Path, DonorDir: donor.DirID,
		RecipientDir: recipient.DirID, Session: "sC"})
	if !errors.Is(err, store.ErrDirChanged) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("adopt into a swapped profile dir: %v, want ErrDirChanged naming %s", err, dir)
	}
	if n := len(messagesOf(t, f.recipient, "sC")); n != 0 {
		t.Errorf("the look-alike store got %d messages", n)
	}
	if n := len(messagesOf(t, filepath.Join(dir+".aside", "state.db"), "sC")); n != 0 {
		t.Errorf("the moved-away store got %d messages", n)
	}
	if ds := sessionRow(t, f.donor, "sC"); ds.Archived.Int64 != 0 {
		t.Errorf("donor retired although nothing was adopted: %+v", ds)
	}
}
