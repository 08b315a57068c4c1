package recovery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stateguard/stateguard/store"
)

// EndReasonAdopted is the end_reason of a donor session retired by an
// adoption. It is not one of Hermes' recoverable end reasons
// (agent_close, ws_orphan_reap, superseded_by_resume,
// startup_orphan_reap), so an adopted donor is never resurrected.
const EndReasonAdopted = "adopted_by_profile"

// maxLineage bounds the walk up parent_session_id.
const maxLineage = 100000

// Segment statuses of an adoption.
const (
	// SegmentAdopted: every row the donor segment had at the export is in
	// the recipient (imported now or already there).
	SegmentAdopted = "adopted"
	// SegmentAlreadyAdopted: the donor was retired by an earlier adoption;
	// it is not adopted again.
	SegmentAlreadyAdopted = "already_adopted"
	// SegmentArchived: the donor is archived for another reason; archived
	// donors are never adopted.
	SegmentArchived = "archived"
	// SegmentConflict: the recipient has a session with this id whose
	// messages are not the donor's; nothing was imported or retired.
	SegmentConflict = "conflict"
)

// AdoptRequest moves a session and its compression lineage from the
// store it was created in by mistake (the donor) into a profile's store.
type AdoptRequest struct {
	Donor     string // the donor store's main file
	Recipient string // the adopting profile's store
	// DonorDir and RecipientDir are the stores' directories as they were
	// resolved (store.Store.DirID): every open goes through a handle on
	// the directory and refuses another one (zero: not compared, still
	// reached without a symlink).
	DonorDir, RecipientDir store.DirID

	Session string // exact session id; titles are never used
	// KeepDonor imports without retiring the donor segments.
	KeepDonor bool
	// BeforeRetire, when set, runs after the import and right before the
	// donor's live counts are re-read for the retirement; tests append to
	// a donor from another process there.
	BeforeRetire func(segments []string)
	Now          func() time.Time
}

// AdoptSegment is what happened to one session of the lineage.
type AdoptSegment struct {
	ID     string `json:"id"`
	Parent string `json:"parent,omitempty"`
	Status string `json:"status"`
	// SessionCreated: the recipient had no session with this id.
	SessionCreated bool `json:"session_created"`
	// Imported counts the messages appended to the recipient now.
	Imported int `json:"messages_imported"`
	// DonorMessages is the donor's count at the export, AdoptedMessages
	// how many of those the recipient holds (imported now or before),
	// DonorMessagesLive the count re-read right before retiring.
	DonorMessages     int   `json:"donor_messages"`
	AdoptedMessages   int   `json:"adopted_messages"`
	DonorMessagesLive int64 `json:"donor_messages_live"`
	DonorRetired      bool  `json:"donor_retired"`
	// Reason says why a segment was skipped or its donor not retired.
	Reason string `json:"reason,omitempty"`
	// DroppedColumns are donor columns the recipient's schema lacks; their
	// values were not imported.
	DroppedColumns []string `json:"dropped_columns,omitempty"`
}

// AdoptReport is the truthful per-segment result of an adoption, root
// first.
type AdoptReport struct {
	Donor     string         `json:"donor"`
	Recipient string         `json:"recipient"`
	Session   string         `json:"session"`
	KeepDonor bool           `json:"keep_donor"`
	Segments  []AdoptSegment `json:"segments"`
	// DonorRetired is true only when every segment's donor is retired
	// (now or by an earlier adoption).
	DonorRetired bool `json:"donor_retired"`
}

// Partial reports whether some segment was skipped, conflicted or (when
// retiring was asked for) not retired.
func (r AdoptReport) Partial() bool {
	for _, s := range r.Segments {
		switch {
		case s.Status == SegmentArchived || s.Status == SegmentConflict:
			return true
		case !r.KeepDonor && !s.DonorRetired:
			return true
		}
	}
	return false
}

// donorSegment is one exported session of the lineage.
type donorSegment struct {
	id, parent string
	cols       []string
	vals       []any
	archived   bool
	endReason  string
	messages   []store.Message
}

// Adopt exports the session and its lineage (the chain of
// parent_session_id) from the donor, imports what the recipient lacks in
// one transaction, and retires each donor segment (end_reason
// adopted_by_profile, archived = 1; never deleted) unless its live count
// is ahead of the adopted copy. Running it again is a no-op.
func Adopt(ctx context.Context, req AdoptRequest) (AdoptReport, error) {
	rep := AdoptReport{Donor: req.Donor, Recipient: req.Recipient, Session: req.Session, KeepDonor: req.KeepDonor}
	if req.Session == "" {
		return rep, errors.New("adopt: a session id is required")
	}
	if req.Donor == req.Recipient {
		return rep, fmt.Errorf("adopt: donor and recipient are the same store %s", req.Donor)
	}
	now := req.Now
	if now == nil {
		now = time.Now
	}
	segs, stop, err := exportLineage(ctx, donorStore(req), req.Session)
	if err != nil {
		return rep, store.Explain(req.Donor, err)
	}
	rep.Segments = make([]AdoptSegment, len(segs))
	for i, s := range segs {
		rep.Segments[i] = AdoptSegment{ID: s.id, Parent: s.parent, DonorMessages: len(s.messages)}
		switch {
		case s.archived && s.endReason == EndReasonAdopted:
			rep.Segments[i].Status, rep.Segments[i].DonorRetired = SegmentAlreadyAdopted, true
			rep.Segments[i].Reason = "retired by an earlier adoption; not adopted again"
		case s.archived:
			rep.Segments[i].Status = SegmentArchived
			rep.Segments[i].Reason = "the donor is archived (end_reason " + quoteOr(s.endReason, "none") + "); archived donors are never adopted"
		}
	}
	if stop != "" && len(rep.Segments) > 0 {
		r := &rep.Segments[0].Reason
		*r = joinReason(*r, stop)
	}
	if err := importLineage(ctx, recipientStore(req), segs, rep.Segments); err != nil {
		return rep, store.Explain(req.Recipient, err)
	}
	if !req.KeepDonor {
		if err := retireDonors(ctx, req, segs, rep.Segments, now()); err != nil {
			return rep, store.Explain(req.Donor, err)
		}
	}
	rep.DonorRetired = len(rep.Segments) > 0
	for _, s := range rep.Segments {
		rep.DonorRetired = rep.DonorRetired && s.DonorRetired
	}
	return rep, nil
}

func donorStore(req AdoptRequest) store.Store {
	return store.Store{Path: req.Donor, DirID: req.DonorDir}
}

func recipientStore(req AdoptRequest) store.Store {
	return store.Store{Path: req.Recipient, DirID: req.RecipientDir}
}

func quoteOr(s, none string) string {
	if s == "" {
		return none
	}
	return "'" + s + "'"
}

func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// exportLineage reads the session and its ancestors, root first, with
// all their messages, through one read-only connection. stop says why the
// walk ended early ("" when it reached a root).
func exportLineage(ctx context.Context, ds store.Store, id string) ([]donorSegment, string, error) {
	donor := ds.Path
	db, err := ds.OpenReadOnly()
	if err != nil {
		return nil, "", fmt.Errorf("adopt: open donor: %w", err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx) // one snapshot for the whole export
	if err != nil {
		return nil, "", fmt.Errorf("adopt: open donor %s: %w", donor, err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, "", fmt.Errorf("adopt: read donor %s: %w", donor, err)
	}
	defer tx.Rollback()
	var segs []donorSegment
	seen := map[string]bool{}
	stop := ""
	for cur := id; cur != ""; {
		if seen[cur] {
			stop = fmt.Sprintf("the lineage loops back to %s; stopped there", cur)
			break
		}
		if len(segs) == maxLineage {
			stop = fmt.Sprintf("the lineage is longer than %d sessions; stopped there", maxLineage)
			break
		}
		seen[cur] = true
		cols, vals, err := readRow(ctx, tx, "sessions", cur)
		if errors.Is(err, store.ErrNoSession) {
			if cur == id {
				return nil, "", fmt.Errorf("adopt: session %s is not in the donor store %s (ids are matched exactly): %w", id, donor, err)
			}
			stop = fmt.Sprintf("parent session %s is not in the donor store; the lineage starts below it", cur)
			break
		}
		if err != nil {
			return nil, "", fmt.Errorf("adopt: read session %s from %s: %w", cur, donor, err)
		}
		s := donorSegment{id: cur, cols: cols, vals: vals}
		s.parent, _ = rowText(cols, vals, "parent_session_id")
		s.endReason, _ = rowText(cols, vals, "end_reason")
		if v, ok := rowValue(cols, vals, "archived"); ok {
			n, _ := v.(int64)
			s.archived = n != 0
		}
		if s.messages, err = store.ReadMessages(ctx, tx, cur); err != nil {
			return nil, "", fmt.Errorf("adopt: read messages of %s from %s: %w", cur, donor, err)
		}
		segs = append(segs, s)
		cur = s.parent
	}
	// Root first: a parent is created before the sessions that name it.
	for i, j := 0, len(segs)-1; i < j; i, j = i+1, j-1 {
		segs[i], segs[j] = segs[j], segs[i]
	}
	return segs, stop, nil
}

// readRow reads every column of one sessions row, as the driver returns
// them.
func readRow(ctx context.Context, q store.Querier, table, id string) ([]string, []any, error) {
	rows, err := q.QueryContext(ctx, "SELECT * FROM "+table+" WHERE id = ?", id)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, nil, err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, nil, err
		}
		return nil, nil, store.ErrNoSession
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, nil, err
	}
	return cols, vals, rows.Err()
}

func rowValue(cols []string, vals []any, name string) (any, bool) {
	for i, c := range cols {
		if c == name {
			return vals[i], true
		}
	}
	return nil, false
}

func rowText(cols []string, vals []any, name string) (string, bool) {
	v, ok := rowValue(cols, vals, name)
	switch x := v.(type) {
	case string:
		return x, ok
	case []byte:
		return string(x), ok
	}
	return "", false
}
