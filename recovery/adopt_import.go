package recovery

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/stateguard/stateguard/store"
)

// importLineage appends, in one transaction on the recipient, every
// segment that is not archived in the donor: the session row when the
// recipient lacks it, then the donor's messages past the longest prefix
// the recipient already holds (so a second run, or a run after the donor
// grew, imports only what is new).
func importLineage(ctx context.Context, rs store.Store, segs []donorSegment, rep []AdoptSegment) (err error) {
	var ids []string
	for i, s := range segs {
		if rep[i].Status == "" {
			ids = append(ids, s.id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	w, err := rs.OpenWritable(ctx)
	if err != nil {
		return fmt.Errorf("adopt: open recipient: %w (nothing was imported or retired)", err)
	}
	// A refused checkpoint fails the import, so no donor is retired: the
	// donor keeps its rows until a run whose import reached the main.
	defer closeWritable(w, "the import into "+rs.Path+" (no donor retired; run adopt again to retire them)", &err)
	result := make([]AdoptSegment, len(rep))
	err = w.InTx(ctx, func(tx *store.Tx) error {
		copy(result, rep) // a retried transaction starts from the same report
		sessCols, err := tableColumns(ctx, tx, "sessions")
		if err != nil {
			return err
		}
		msgCols, err := tableColumns(ctx, tx, "messages")
		if err != nil {
			return err
		}
		exists, err := existingSessions(ctx, tx, ids)
		if err != nil {
			return err
		}
		for i := range segs {
			if result[i].Status != "" {
				continue
			}
			if err := importSegment(ctx, tx, &segs[i], &result[i], exists[segs[i].id], sessCols, msgCols); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("adopt: import into %s: %w (nothing was imported or retired)", rs.Path, err)
	}
	copy(rep, result)
	return nil
}

func importSegment(ctx context.Context, tx *store.Tx, s *donorSegment, rs *AdoptSegment, exists bool, sessCols, msgCols map[string]bool) error {
	var have []store.Message
	if exists {
		var err error
		if have, err = store.ReadMessages(ctx, tx, s.id); err != nil {
			return err
		}
	} else {
		if err := insertSession(ctx, tx, s, sessCols); err != nil {
			return err
		}
		rs.SessionCreated = true
	}
	matched := prefixMatched(s.messages, have)
	if matched == 0 && len(have) > 0 && len(s.messages) > 0 {
		rs.Status = SegmentConflict
		rs.Reason = fmt.Sprintf("the recipient has a session %s with %d messages that do not start like the donor's; nothing imported, donor not retired", s.id, len(have))
		return nil
	}
	dropped := map[string]bool{}
	for _, m := range s.messages[matched:] {
		for _, c := range dropAbsent(&m, msgCols) {
			dropped[c] = true
		}
		if m.DisplayOrder.Valid && m.DisplayOrder.Int64 == m.ID {
			// The donor's trigger set it to the donor's id; let the
			// recipient's trigger set it to the new one.
			m.DisplayOrder.Valid = false
		}
		m.ID = 0
		if _, err := tx.AppendMessage(m); err != nil {
			return err
		}
	}
	for c := range dropped {
		rs.DroppedColumns = append(rs.DroppedColumns, c)
	}
	sort.Strings(rs.DroppedColumns)
	rs.Imported = len(s.messages) - matched
	rs.AdoptedMessages = len(s.messages)
	rs.Status = SegmentAdopted
	return nil
}

// insertSession copies the donor's session row, every column the
// recipient also has, with the counters at zero: each appended message
// bumps them, as Hermes' append does.
func insertSession(ctx context.Context, tx *store.Tx, s *donorSegment, have map[string]bool) error {
	var cols []string
	var args []any
	for i, c := range s.cols {
		if !have[c] {
			continue
		}
		v := s.vals[i]
		if c == "message_count" || c == "tool_call_count" {
			v = int64(0)
		}
		cols = append(cols, `"`+strings.ReplaceAll(c, `"`, `""`)+`"`)
		args = append(args, v)
	}
	q := "INSERT INTO sessions (" + strings.Join(cols, ", ") + ") VALUES (" + placeholderList(len(cols)) + ")"
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("create session %s: %w", s.id, err)
	}
	return nil
}

// prefixMatched walks the recipient's rows with one forward-only cursor
// and returns how many of the donor's messages, in order, it finds (the
// replay's longest-prefix rule: rows may lie between them).
func prefixMatched(donor, have []store.Message) int {
	j := 0
	for i, m := range donor {
		for j < len(have) && !sameMessage(m, have[j]) {
			j++
		}
		if j == len(have) {
			return i
		}
		j++
	}
	return len(donor)
}

func sameMessage(a, b store.Message) bool {
	return a.Role == b.Role && a.Content == b.Content && a.ToolCallID == b.ToolCallID &&
		a.ToolName == b.ToolName && a.ToolCalls == b.ToolCalls && a.Timestamp == b.Timestamp
}

// optionalMessageColumns maps the messages columns a schema may lack to
// store.Message's fields.
var optionalMessageColumns = map[string]string{
	"content": "Content", "tool_call_id": "ToolCallID", "tool_calls": "ToolCalls", "tool_name": "ToolName",
	"effect_disposition": "EffectDisposition", "timestamp": "Timestamp", "token_count": "TokenCount",
	"finish_reason": "FinishReason", "reasoning": "Reasoning", "reasoning_content": "ReasoningContent",
	"reasoning_details": "ReasoningDetails", "codex_reasoning_items": "CodexReasoningItems",
	"codex_message_items": "CodexMessageItems", "platform_message_id": "PlatformMessageID",
	"observed": "Observed", "_compressed_summary": "CompressedSummary", "active": "Active",
	"compacted": "Compacted", "api_content": "APIContent", "display_kind": "DisplayKind",
	"display_metadata": "DisplayMetadata", "display_identity": "DisplayIdentity", "display_order": "DisplayOrder",
	"message_uid": "MessageUID", "absorbed_message_uids": "AbsorbedMessageUIDs",
	"tool_call_uids": "ToolCallUIDs", "tool_call_uid": "ToolCallUID",
}

// dropAbsent clears the fields of m whose columns the recipient lacks
// (a v31 donor into a v30 recipient) and returns those that held a value.
func dropAbsent(m *store.Message, have map[string]bool) []string {
	var dropped []string
	v := reflect.ValueOf(m).Elem()
	for col, field := range optionalMessageColumns {
		if have[col] {
			continue
		}
		f := v.FieldByName(field)
		if !f.IsZero() {
			dropped = append(dropped, col)
		}
		f.SetZero()
	}
	for k := range m.Extra {
		if !have[k] {
			dropped = append(dropped, k)
			delete(m.Extra, k)
		}
	}
	return dropped
}

// retireDonors archives each adopted donor segment, in one transaction
// on the donor that re-reads the live message counts first: while it
// holds the write lock no writer can append between the count and the
// retirement. A segment whose live count is ahead of the adopted copy is
// left alone. A failure is reported per segment, not hidden.
func retireDonors(ctx context.Context, req AdoptRequest, segs []donorSegment, rep []AdoptSegment, now time.Time) (err error) {
	var ids []string
	for i, s := range segs {
		if rep[i].Status == SegmentAdopted {
			ids = append(ids, s.id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if req.BeforeRetire != nil {
		req.BeforeRetire(slices.Clone(ids))
	}
	fail := func(err error) error {
		for i := range rep {
			if rep[i].Status == SegmentAdopted && !rep[i].DonorRetired {
				rep[i].Reason = joinReason(rep[i].Reason, "not retired: "+err.Error())
			}
		}
		return nil
	}
	w, err := donorStore(req).OpenWritable(ctx)
	if err != nil {
		return fail(err)
	}
	defer closeWritable(w, "the retirement in "+req.Donor, &err)
	result := make([]AdoptSegment, len(rep))
	err = w.InTx(ctx, func(tx *store.Tx) error {
		copy(result, rep)
		live, err := messageCounts(ctx, tx, ids)
		if err != nil {
			return err
		}
		ts := float64(now.UnixNano()) / 1e9
		for i := range result {
			rs := &result[i]
			if rs.Status != SegmentAdopted {
				continue
			}
			rs.DonorMessagesLive = live[rs.ID]
			if rs.DonorMessagesLive > int64(rs.AdoptedMessages) {
				rs.Reason = joinReason(rs.Reason, fmt.Sprintf("donor not retired: it has %d messages, the adopted copy %d (a writer appended since the export); run adopt again to take them",
					rs.DonorMessagesLive, rs.AdoptedMessages))
				continue
			}
			res, err := tx.ExecContext(ctx, `UPDATE sessions SET end_reason = ?, archived = 1, ended_at = COALESCE(ended_at, ?)
				WHERE id = ? AND archived = 0`, EndReasonAdopted, ts, rs.ID)
			if err != nil {
				return fmt.Errorf("retire %s: %w", rs.ID, err)
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				rs.Reason = joinReason(rs.Reason, "donor not retired: it was archived or removed since the export")
				continue
			}
			rs.DonorRetired = true
		}
		return nil
	})
	if err != nil {
		return fail(fmt.Errorf("retire donors in %s: %w", req.Donor, err))
	}
	copy(rep, result)
	return nil
}
