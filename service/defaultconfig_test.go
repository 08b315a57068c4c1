package service

import (
	"bytes"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/stateguard/stateguard/control"
)

// A commented setting is "#key = value" or "#[table]", with no space after
// the "#"; prose comments have one.
var commentedSetting = regexp.MustCompile(`^#([a-z\[][a-z_.\]]*( = .*)?)$`)

func uncomment(b []byte) ([]byte, int) {
	var out bytes.Buffer
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if m := commentedSetting.FindStringSubmatch(line); m != nil {
			line = m[1]
			n++
		}
		out.WriteString(line + "\n")
	}
	return out.Bytes(), n
}

func encodeConfig(t *testing.T, c *Config) string {
	t.Helper()
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(c); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestDefaultConfigFileIsTheDefaults: as shipped the file changes nothing,
// and each "#key = value" line states the real default, so uncommenting
// every one of them changes nothing either (for root, whose state_dir and
// socket the file names).
func TestDefaultConfigFileIsTheDefaults(t *testing.T) {
	want := &Config{}
	want.ApplyDefaults()

	shipped, err := Parse(DefaultConfigFile)
	if err != nil {
		t.Fatalf("the default config file does not parse: %v", err)
	}
	if got, w := encodeConfig(t, shipped), encodeConfig(t, want); got != w {
		t.Errorf("as shipped it is not the defaults:\n%s\nwant\n%s", got, w)
	}

	text, n := uncomment(DefaultConfigFile)
	if n < 20 {
		t.Fatalf("only %d commented settings found; the file's convention changed?", n)
	}
	all, err := Parse(text)
	if err != nil {
		t.Fatalf("uncommented, the default config file does not parse: %v\n%s", err, text)
	}
	noEnv := func(string) string { return "" }
	if all.StateDir != control.DefaultStateDir(noEnv, 0) {
		t.Errorf("state_dir %q, root's default is %q", all.StateDir, control.DefaultStateDir(noEnv, 0))
	}
	if sock := filepath.Join(control.DefaultRuntimeDir(noEnv, 0), control.SocketFile); all.Socket != sock {
		t.Errorf("socket %q, root's default is %q", all.Socket, sock)
	}
	all.StateDir, all.Socket = "", ""
	// "#exclude = []" says "none", as an absent key does.
	if len(all.Exclude)+len(all.Homes)+len(all.Alert.Exec) == 0 {
		all.Exclude, all.Homes, all.Alert.Exec = nil, nil, nil
	}
	if got, w := encodeConfig(t, all), encodeConfig(t, want); got != w {
		t.Errorf("uncommented it is not the defaults:\n%s\nwant\n%s", got, w)
	}
}

// TestDefaultConfigFileNamesEveryKey: a key added to Config must be
// documented in the shipped file too.
func TestDefaultConfigFileNamesEveryKey(t *testing.T) {
	text, _ := uncomment(DefaultConfigFile)
	var doc map[string]any
	if err := toml.Unmarshal(text, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if tag == "" || tag == "-" || tag == "store" {
				continue // [[store]] blocks are examples in prose
			}
			key := strings.TrimPrefix(prefix+"."+tag, ".")
			ft := f.Type
			if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(Duration{}) {
				walk(key, ft)
				continue
			}
			if !hasKey(doc, strings.Split(key, ".")) {
				t.Errorf("the default config file does not show %s", key)
			}
		}
	}
	walk("", reflect.TypeOf(Config{}))
}

func hasKey(doc map[string]any, path []string) bool {
	v, ok := doc[path[0]]
	if !ok {
		return false
	}
	if len(path) == 1 {
		return true
	}
	sub, ok := v.(map[string]any)
	return ok && hasKey(sub, path[1:])
}
