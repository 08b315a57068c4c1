package incident

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/journal"
)

// The state table drawn in doc.go is the table the engine runs: same
// states, same transitions, same terminal states (that the journal
// stores each of its moves is TestTableIsTheOnlyRule's).
func TestDiagramMatchesTable(t *testing.T) {
	f, err := os.Open("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	drawn := map[journal.State][]journal.State{}
	terminal := map[journal.State]bool{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "The state table (") {
			in = true
			continue
		}
		if !in {
			continue
		}
		body, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			if len(drawn) > 0 {
				break // the block ended
			}
			continue
		}
		from, rest, _ := strings.Cut(body, " ")
		rest = strings.TrimSpace(rest)
		switch {
		case rest == "(terminal)":
			terminal[journal.State(from)] = true
			drawn[journal.State(from)] = nil
		case strings.HasPrefix(rest, "-> "):
			for _, to := range strings.Fields(strings.TrimPrefix(rest, "-> ")) {
				drawn[journal.State(from)] = append(drawn[journal.State(from)], journal.State(to))
			}
		default:
			t.Fatalf("doc.go: cannot read state table line %q", line)
		}
	}
	if len(drawn) == 0 {
		t.Fatal("doc.go has no state table")
	}
	table := newTable()
	for s, ent := range table {
		d, ok := drawn[s]
		switch {
		case !ok:
			t.Errorf("state %s is in the table but not drawn", s)
		case ent.terminal != terminal[s]:
			t.Errorf("state %s: terminal %v in the table, %v in the drawing", s, ent.terminal, terminal[s])
		case !sameSet(ent.next, d):
			t.Errorf("state %s: table goes to %v, the drawing to %v", s, ent.next, d)
		}
		if !s.Valid() {
			t.Errorf("state %s is not a journal state", s)
		}
	}
	for s := range drawn {
		if _, ok := table[s]; !ok {
			t.Errorf("state %s is drawn but not in the table", s)
		}
	}
	for _, s := range journal.States() {
		if _, ok := table[s]; !ok {
			t.Errorf("journal state %s has no entry in the table", s)
		}
	}
}

func sameSet(a, b []journal.State) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}
