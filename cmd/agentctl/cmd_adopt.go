package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/stateguard/stateguard/recovery"
)

func adoptUsage(w io.Writer, fs *flag.FlagSet) {
	printUsage(w, fs, `usage: agentctl adopt --from PROFILE --to PROFILE --session ID [--keep-donor] [--home H] [--json]

Imports the session ID (matched exactly, never by title) and its compression
lineage (its chain of parent_session_id) from the --from profile's store into
the --to profile's, in one transaction, then retires each donor session: archived
with end_reason 'adopted_by_profile', never deleted. A donor whose live message
count is ahead of the adopted copy (a writer appended since) is not retired; run
adopt again to take the new rows. Archived donors are never adopted. A second run
changes nothing.
`, `Exit codes: 0 done, 1 error (nothing imported or retired), 2 usage,
4 partial: a segment was skipped, conflicted, or its donor not retired.
`)
}

func runAdopt(ctx context.Context, e *env, args []string) int {
	v := newVerb(e, "adopt", adoptUsage)
	from := v.fs.String("from", "", "profile whose store holds the session (the donor)")
	to := v.fs.String("to", "", "profile whose store adopts it")
	session := v.fs.String("session", "", "session id, exactly")
	keep := v.fs.Bool("keep-donor", false, "import only; leave the donor sessions as they are")
	home := v.fs.String("home", "", "Hermes home (default $HERMES_HOME, else ~/.hermes)")
	asJSON := v.fs.Bool("json", false, "print the per-segment result as JSON")
	_, code, ok := v.parse(args, func(pos []string) string {
		switch {
		case len(pos) != 0:
			return fmt.Sprintf("unexpected arguments %q", pos)
		case *from == "" || *to == "" || *session == "":
			return "--from, --to and --session are required"
		case *from == *to:
			return "--from and --to name the same profile"
		}
		return ""
	})
	if !ok {
		return code
	}
	donor, err := resolveStoreOf(e, "", *from, *home)
	if err != nil {
		return v.fail(fmt.Errorf("--from: %w", err))
	}
	recipient, err := resolveStoreOf(e, "", *to, *home)
	if err != nil {
		return v.fail(fmt.Errorf("--to: %w", err))
	}
	rep, err := recovery.Adopt(ctx, recovery.AdoptRequest{Donor: donor.Path, Recipient: recipient.Path,
		DonorDir: donor.DirID, RecipientDir: recipient.DirID, Session: *session, KeepDonor: *keep})
	if err != nil {
		return v.fail(err)
	}
	if *asJSON {
		if code := v.printJSON(rep); code != exitOK {
			return code
		}
	} else {
		printAdopt(e.stdout, rep, *from, *to)
	}
	if rep.Partial() {
		fmt.Fprintln(e.stderr, "agentctl adopt: partial: see the segments above; donor_retired is false")
		return exitPartial
	}
	return exitOK
}

func printAdopt(w io.Writer, rep recovery.AdoptReport, from, to string) {
	fmt.Fprintf(w, "adopt session %s from %s (%s) into %s (%s)\n", rep.Session, from, rep.Donor, to, rep.Recipient)
	for _, s := range rep.Segments {
		var parts []string
		parts = append(parts, s.Status)
		if s.SessionCreated {
			parts = append(parts, "session created")
		}
		if s.Status == recovery.SegmentAdopted {
			parts = append(parts, fmt.Sprintf("%d of %d messages imported now", s.Imported, s.DonorMessages))
		}
		switch {
		case s.DonorRetired && s.Status == recovery.SegmentAdopted:
			parts = append(parts, "donor retired")
		case s.DonorRetired:
		case rep.KeepDonor && s.Status == recovery.SegmentAdopted:
			parts = append(parts, "donor kept (--keep-donor)")
		default:
			parts = append(parts, "donor NOT retired")
		}
		if len(s.DroppedColumns) > 0 {
			parts = append(parts, "columns the recipient lacks, not imported: "+strings.Join(s.DroppedColumns, ", "))
		}
		parent := "root"
		if s.Parent != "" {
			parent = "parent " + s.Parent
		}
		fmt.Fprintf(w, "  %s (%s): %s\n", s.ID, parent, strings.Join(parts, "; "))
		if s.Reason != "" {
			fmt.Fprintf(w, "      %s\n", s.Reason)
		}
	}
	fmt.Fprintf(w, "donor_retired: %v\n", rep.DonorRetired)
}
