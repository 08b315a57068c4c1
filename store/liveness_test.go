package store

import "testing"

func TestHolderPID(t *testing.T) {
	for holder, want := range map[string]int{
		"pid=123":                       123,
		"gateway host=h pid=77 tid=9":   77,
		"backend:gw1;pid=5":             5,
		"ppid=5":                        0,
		"pid=":                          0,
		"":                              0,
		"pid=99999999999999999999999":   0,
		"worker pid=12 other pid=13 ok": 12,
	} {
		if got := HolderPID(holder); got != want {
			t.Errorf("HolderPID(%q) = %d, want %d", holder, got, want)
		}
	}
}
