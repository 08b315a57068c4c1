// Package pyjson is JSON as CPython's json module reads and writes it,
// down to the byte: Hermes hashes json.dumps(record, sort_keys=True,
// ensure_ascii=False) into every diverted row's recovery id, so a replay
// that serialized one float, one escape or one duplicate key differently
// would duplicate rows instead of matching them.
//
// Value keeps what Python keeps and encoding/json loses (int vs float
// literals, unbounded ints, dict order with duplicates collapsed, NaN and
// Infinity, lone surrogates); Parse is json.loads, Dumps is json.dumps,
// FloatRepr is repr(float), Float is float(x), and DecodeUTF8Replace is
// bytes.decode("utf-8", errors="replace"). Every rule is checked against
// cases computed by CPython itself (testdata/gen.py).
package pyjson
