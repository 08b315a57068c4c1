package holders

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// buildFixture assembles the bytes a testdata/libproc/*/input.txt spells
// out (syntax in testdata/libproc/README.md).
func buildFixture(t *testing.T, path string) []byte {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	for n, line := range strings.Split(string(text), "\n") {
		line, _, _ = strings.Cut(line, "#")
		for _, tok := range strings.Fields(line) {
			kind, val, ok := strings.Cut(tok, ":")
			if !ok {
				t.Fatalf("%s:%d: bad token %q", path, n+1, tok)
			}
			num := func(s string) uint64 {
				v, err := strconv.ParseInt(s, 0, 64)
				if err != nil {
					u, uerr := strconv.ParseUint(s, 0, 64)
					if uerr != nil {
						t.Fatalf("%s:%d: bad number %q", path, n+1, s)
					}
					return u
				}
				return uint64(v)
			}
			switch kind {
			case "u16":
				b = binary.LittleEndian.AppendUint16(b, uint16(num(val)))
			case "u32", "i32":
				b = binary.LittleEndian.AppendUint32(b, uint32(num(val)))
			case "u64":
				b = binary.LittleEndian.AppendUint64(b, num(val))
			case "zero":
				b = append(b, make([]byte, num(val))...)
			case "str":
				size, s, _ := strings.Cut(val, ":")
				field := make([]byte, num(size))
				if copy(field, s) != len(s) || len(s) == len(field) {
					t.Fatalf("%s:%d: %q does not fit %s bytes with its NUL", path, n+1, s, size)
				}
				b = append(b, field...)
			default:
				t.Fatalf("%s:%d: unknown kind %q", path, n+1, kind)
			}
		}
	}
	return b
}

func TestLibprocDecodeFixtures(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "libproc", "*", "input.txt"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, in := range dirs {
		dir := filepath.Dir(in)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			b := buildFixture(t, in)
			raw, err := os.ReadFile(filepath.Join(dir, "want.json"))
			if err != nil {
				t.Fatal(err)
			}
			var want struct {
				Pids  []int
				FDs   []procFD `json:"fds"`
				File  *vnodeFile
				Info  *bsdInfo
				Error string
			}
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			name := filepath.Base(dir)
			var got any
			var gotErr error
			switch {
			case strings.HasPrefix(name, "listpids"):
				got = decodePids(b)
				if !reflect.DeepEqual(got, want.Pids) {
					t.Fatalf("pids %v, want %v", got, want.Pids)
				}
			case strings.HasPrefix(name, "listfds"):
				got = decodeFDs(b)
				if !reflect.DeepEqual(got, want.FDs) {
					t.Fatalf("fds %+v, want %+v", got, want.FDs)
				}
			case strings.HasPrefix(name, "vnodepath"):
				var v vnodeFile
				v, gotErr = decodeVnodeFDInfoWithPath(b)
				if gotErr == nil && !reflect.DeepEqual(v, *want.File) {
					t.Fatalf("file %+v, want %+v", v, *want.File)
				}
			case strings.HasPrefix(name, "bsdinfo"):
				var v bsdInfo
				v, gotErr = decodeBSDInfo(b)
				if gotErr == nil && !reflect.DeepEqual(v, *want.Info) {
					t.Fatalf("info %+v, want %+v", v, *want.Info)
				}
			default:
				t.Fatalf("no decoder for fixture %s", name)
			}
			switch {
			case want.Error != "" && (gotErr == nil || gotErr.Error() != want.Error):
				t.Fatalf("error %v, want %q", gotErr, want.Error)
			case want.Error == "" && gotErr != nil:
				t.Fatal(gotErr)
			}
		})
	}
}

// The fixtures' sizes are the structs' sizes in proc_info.h; a drifting
// offset constant would show here before it shows on a Mac.
func TestLibprocLayoutConstants(t *testing.T) {
	if vipPath+maxPathLen != vnodeFDInfoWithPathSize {
		t.Fatalf("vip_path ends at %d, struct is %d bytes", vipPath+maxPathLen, vnodeFDInfoWithPathSize)
	}
	if pbiStartUsec+8 != procBSDInfoSize {
		t.Fatalf("pbi_start_tvusec ends at %d, struct is %d bytes", pbiStartUsec+8, procBSDInfoSize)
	}
	for _, c := range []struct {
		dir  string
		size int
	}{{"vnodepath-current-main", vnodeFDInfoWithPathSize}, {"bsdinfo-writer", procBSDInfoSize}} {
		if n := len(buildFixture(t, filepath.Join("testdata", "libproc", c.dir, "input.txt"))); n != c.size {
			t.Errorf("%s: fixture is %d bytes, want %d", c.dir, n, c.size)
		}
	}
}
