package fileid

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestPairJSON(t *testing.T) {
	b, err := json.Marshal(map[string]Pair{"wal": {Dev: 2049, Ino: 1835532}})
	if err != nil || string(b) != `{"wal":[2049,1835532]}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	for _, in := range []string{`[2049,1835532]`, `"2049:1835532"`, `{"dev":2049,"ino":1835532}`} {
		var p Pair
		if err := json.Unmarshal([]byte(in), &p); err != nil || p.ID() != (ID{Dev: 2049, Ino: 1835532}) {
			t.Errorf("unmarshal %s: %+v %v", in, p, err)
		}
	}
	for _, in := range []string{`[1]`, `"1-2"`, `true`} {
		var p Pair
		if err := json.Unmarshal([]byte(in), &p); err == nil {
			t.Errorf("unmarshal %s: no error", in)
		}
	}
	var p *Pair
	if err := json.Unmarshal([]byte(`null`), &p); err != nil || p != nil {
		t.Errorf("null: %v %v", p, err)
	}
}

func TestLstat(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "a")
	if err := os.WriteFile(f, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := Lstat(f)
	if err != nil || !st.Regular() || st.Size != 5 {
		t.Fatalf("Lstat: %+v %v", st, err)
	}
	if Supported && (st.ID.IsZero() || st.Nlink != 1 || st.UID != os.Getuid()) {
		t.Fatalf("Lstat on %s: %+v", runtime.GOOS, st)
	}
	link := filepath.Join(dir, "l")
	if err := os.Symlink(f, link); err != nil {
		t.Fatal(err)
	}
	if ls, err := Lstat(link); err != nil || ls.Regular() || (Supported && ls.ID == st.ID) {
		t.Fatalf("Lstat followed the link: %+v %v", ls, err)
	}
	if m, err := Lstat(filepath.Join(dir, "none")); err != nil || m.Exists || m.UID != -1 {
		t.Fatalf("missing: %+v %v", m, err)
	}
	fi, err := os.Stat(f)
	if err != nil || Of(fi) != st {
		t.Fatalf("Of(Stat) = %+v, Lstat %+v", Of(fi), st)
	}
}
