package holders

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/fileid"
)

var updateFuzzCorpus = flag.Bool("update-fuzz-corpus", false, "rewrite testdata/fuzz/FuzzLibprocDecode/fixture-* from the libproc fixtures")

// FuzzLibprocDecode feeds arbitrary bytes to every libproc decoder: none
// panics, none returns more than the input holds, and each field is the
// little-endian word at its offset in xnu's proc_info.h (the offsets are
// restated here as numbers, independently of the constants in
// libproc.go). The fixed-size decoders also get the input stretched or cut
// to their struct's size, so the accepting path is fuzzed too. Seeds: the
// byte fixtures under testdata/libproc, committed as
// testdata/fuzz/FuzzLibprocDecode/fixture-* (TestLibprocFuzzCorpus keeps
// them equal), plus any crasher found since.
func FuzzLibprocDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 1200))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkPids(t, b)
		checkFDs(t, b)
		for _, in := range [][]byte{b, fitTo(b, 1200)} {
			checkVnodePath(t, in)
		}
		for _, in := range [][]byte{b, fitTo(b, 136)} {
			checkBSDInfo(t, in)
		}
	})
}

func le16(b []byte, off int) uint16 { return uint16(b[off]) | uint16(b[off+1])<<8 }
func le32(b []byte, off int) uint32 {
	return uint32(b[off]) | uint32(b[off+1])<<8 | uint32(b[off+2])<<16 | uint32(b[off+3])<<24
}
func le64(b []byte, off int) uint64 { return uint64(le32(b, off)) | uint64(le32(b, off+4))<<32 }

// fitTo repeats or cuts b to n bytes.
func fitTo(b []byte, n int) []byte {
	if len(b) == 0 {
		return make([]byte, n)
	}
	out := bytes.Repeat(b, n/len(b)+1)
	return out[:n]
}

func checkPids(t *testing.T, b []byte) {
	got := decodePids(b)
	var want []int
	for off := 0; off+4 <= len(b); off += 4 {
		if p := int32(le32(b, off)); p > 0 {
			want = append(want, int(p))
		}
	}
	if len(got) > len(b)/4 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pids %v from %d bytes, want %v", got, len(b), want)
	}
}

func checkFDs(t *testing.T, b []byte) {
	got := decodeFDs(b)
	if len(got) != len(b)/8 {
		t.Fatalf("%d fds from %d bytes", len(got), len(b))
	}
	for i, fd := range got {
		if fd.FD != int(int32(le32(b, 8*i))) || fd.Type != le32(b, 8*i+4) {
			t.Fatalf("fd %d: %+v", i, fd)
		}
	}
}

func checkVnodePath(t *testing.T, b []byte) {
	v, err := decodeVnodeFDInfoWithPath(b)
	if len(b) != 1200 {
		if err == nil {
			t.Fatalf("accepted a %d-byte vnode_fdinfowithpath", len(b))
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	// vip_path: char[1024] at 176, NUL-terminated unless full.
	path := b[176:1200]
	if i := bytes.IndexByte(path, 0); i >= 0 {
		path = path[:i]
	}
	if len(v.Path) > 1024 || strings.IndexByte(v.Path, 0) >= 0 || v.Path != string(path) {
		t.Fatalf("path %q, the bytes say %q", v.Path, path)
	}
	want := vnodeFile{
		OpenFlags: le32(b, 0), // proc_fileinfo.fi_openflags
		Path:      v.Path,
		ID:        fileid.ID{Dev: uint64(le32(b, 24)), Ino: le64(b, 32)},
		Nlink:     uint64(le16(b, 30)),
		Mode:      le16(b, 28),
		UID:       le32(b, 40),
		GID:       le32(b, 44),
		Size:      int64(le64(b, 112)),
	}
	if v != want {
		t.Fatalf("decoded %+v, the layout says %+v", v, want)
	}
}

func checkBSDInfo(t *testing.T, b []byte) {
	v, err := decodeBSDInfo(b)
	if len(b) != 136 {
		if err == nil {
			t.Fatalf("accepted a %d-byte proc_bsdinfo", len(b))
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	// pbi_comm: char[MAXCOMLEN=16] at 48.
	comm := b[48:64]
	if i := bytes.IndexByte(comm, 0); i >= 0 {
		comm = comm[:i]
	}
	if len(v.Comm) > 16 || v.Comm != string(comm) {
		t.Fatalf("comm %q, the bytes say %q", v.Comm, comm)
	}
	want := bsdInfo{
		Pid: int(le32(b, 12)), Status: le32(b, 4), UID: int(le32(b, 20)), RUID: int(le32(b, 28)),
		GID: int(le32(b, 24)), Comm: v.Comm, StartMicros: le64(b, 120)*1000000 + le64(b, 128),
	}
	if v != want {
		t.Fatalf("decoded %+v, the layout says %+v", v, want)
	}
}

// TestLibprocFuzzCorpus: the fuzz seeds are the libproc fixtures' bytes.
// buildFixture needs a *testing.T, which a fuzz target's setup does not
// have, so the seeds are committed files and this test keeps them equal
// to the fixtures (run with -update-fuzz-corpus after changing one).
func TestLibprocFuzzCorpus(t *testing.T) {
	ins, err := filepath.Glob(filepath.Join("testdata", "libproc", "*", "input.txt"))
	if err != nil || len(ins) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzLibprocDecode")
	for _, in := range ins {
		name := "fixture-" + filepath.Base(filepath.Dir(in))
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", buildFixture(t, in))
		path := filepath.Join(dir, name)
		if *updateFuzzCorpus {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update-fuzz-corpus)", err)
		}
		if string(got) != want {
			t.Errorf("%s differs from %s (run with -update-fuzz-corpus)", path, in)
		}
	}
}
