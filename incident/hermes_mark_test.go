package incident

import (
	"testing"
	"time"
)

func TestTailMark(t *testing.T) {
	since := time.Unix(2000, 0)
	old := `{"role": "user", "content": "a", "timestamp": 1999.5}` + "\n"
	none := `{"role": "user", "content": "b", "timestamp": null}` + "\n"
	after := `{"role": "user", "content": "c", "timestamp": 2000.25}` + "\n"
	torn := `{"role": "user", "content": "d", "timest`
	cases := []struct {
		name string
		buf  string
		cut  bool
		want int
	}{
		{"all old", old + old, false, 2 * len(old)},
		{"new tail", old + after + after, false, len(old)},
		{"all new", after + after, false, 0},
		{"a line without a stamp ends the tail", after + none + after, false, len(after) + len(none)},
		{"a torn last line is not counted", old + after + torn, false, len(old)},
		{"a cut window never marks inside its first line", "ignored\n" + after, true, len("ignored\n")},
		{"empty", "", false, 0},
	}
	for _, c := range cases {
		if got := tailMark([]byte(c.buf), c.cut, since); got != int64(c.want) {
			t.Errorf("%s: mark %d, want %d", c.name, got, c.want)
		}
	}
}
