package journald

import (
	"encoding/binary"
	"log/slog"
	"strings"
)

// appendField appends one field in the native protocol's encoding.
func appendField(b []byte, name, value string) []byte {
	if !strings.ContainsRune(value, '\n') {
		b = append(b, name...)
		b = append(b, '=')
		b = append(b, value...)
		return append(b, '\n')
	}
	b = append(b, name...)
	b = append(b, '\n')
	b = binary.LittleEndian.AppendUint64(b, uint64(len(value)))
	b = append(b, value...)
	return append(b, '\n')
}

// reserved are the fields the handler sets itself, or that mean something
// to journald or journalctl; an attribute by one of these names is sent
// as ATTR_<NAME> instead, so it cannot pose as the record's own.
var reserved = map[string]bool{
	"MESSAGE": true, "MESSAGE_ID": true, "PRIORITY": true,
	"CODE_FILE": true, "CODE_LINE": true, "CODE_FUNC": true, "ERRNO": true,
	"SYSLOG_IDENTIFIER": true, "SYSLOG_FACILITY": true, "SYSLOG_PID": true,
	"SYSLOG_TIMESTAMP": true, "SYSLOG_RAW": true, "DOCUMENTATION": true, "TID": true,
	"INVOCATION_ID": true, "USER_INVOCATION_ID": true, "UNIT": true, "USER_UNIT": true,
	"OBJECT_PID": true, "COREDUMP_UNIT": true, "COREDUMP_USER_UNIT": true,
}

// maxName is journald's limit on a field name's length.
const maxName = 64

// FieldName is the journal field an attribute key (with its groups,
// outermost first) is sent as: upper case, every character outside
// [A-Z0-9_] an underscore, groups joined by underscores. journald drops
// names that start with an underscore (trusted fields) or a digit, or
// run past 64 bytes; those get an ATTR_ prefix or are cut.
func FieldName(groups []string, key string) string {
	var b strings.Builder
	for _, part := range append(append([]string(nil), groups...), key) {
		if b.Len() > 0 {
			b.WriteByte('_')
		}
		for _, r := range part {
			switch {
			case r >= 'a' && r <= 'z':
				b.WriteRune(r - 'a' + 'A')
			case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
				b.WriteRune(r)
			default:
				b.WriteByte('_')
			}
		}
	}
	name := b.String()
	if name == "" || name[0] == '_' || (name[0] >= '0' && name[0] <= '9') || reserved[name] {
		name = "ATTR_" + name
	}
	if len(name) > maxName {
		name = name[:maxName]
	}
	return name
}

// Priority is the syslog priority journald files a record under:
// err, warning, info or debug.
func Priority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return 3
	case l >= slog.LevelWarn:
		return 4
	case l >= slog.LevelInfo:
		return 6
	}
	return 7
}
