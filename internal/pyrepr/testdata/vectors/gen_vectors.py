#!/usr/bin/env python3
"""Writes vectors.json: repr() and SHA-256 of repr() (UTF-8, surrogatepass)
for values and tuples that exercise every rule pyrepr reproduces. Our own
code; run once with the machine's Python 3.11:

    python3 gen_vectors.py > vectors.json

Values are tagged so JSON can carry them exactly: {"s": hex of the str's
UTF-8 with surrogatepass}, {"f": float.hex()}, {"i": decimal}, {"none": true}.
"""
import hashlib
import json
import sys
import unicodedata


def tag(v):
    if v is None:
        return {"none": True}
    if isinstance(v, float):
        return {"f": v.hex()}
    if isinstance(v, int):
        return {"i": str(v)}
    return {"s": v.encode("utf-8", "surrogatepass").hex()}


def vector(v):
    r = repr(v)
    out = {"repr_hex": r.encode("utf-8", "surrogatepass").hex(),
           "sha256": hashlib.sha256(r.encode("utf-8", "surrogatepass")).hexdigest()}
    if isinstance(v, tuple):
        out["tuple"] = [tag(x) for x in v]
    else:
        out["value"] = tag(v)
    return out


strings = [
    "", "hello", "it's", 'say "hi"', "both ' and \"", "back\\slash", "\\'\"", "tab\tnew\nline\rreturn",
    "".join(chr(c) for c in range(0x20)), "\x7f", "".join(chr(c) for c in range(0x80, 0xa1)),
    "\xad soft hyphen", "é ñ ü ß", "e\u0301 combining", "漢字かなカナ", "한국어", "שלום", "مرحبا\u061c",
    "🙂", "👩\u200d💻", "🇺🇳", "\u2028 \u2029", "\u3000 ideographic space", "\ufeffbom", "\ue000 private",
    "\U000f0000 plane 15", "\U0010ffff", "\ufdd0 \ufffe \U0001fffe", "\u0378 unassigned in 14",
    "\U0001faf8 added in Unicode 15", "\u0cf3 kannada 15", "\ud800", "\udfff", "\ud83d\ude42 two lone halves",
    "\udc80 escaped byte", "\x00json:[{\"type\": \"text\", \"text\": \"hi\"}]", '[{"id": "call_1", "type": "function"}]',
    "msg s1 #1", "/src/auth.py", "a" * 300, "\x1b[31mred\x1b[0m", "\u180e mongolian vowel separator",
    "\u200b\u200c\u200d\u2060 zero widths", "\u00a0nbsp", "\u2002\u2003 spaces", "line\u0085next",
]
floats = [
    0.0, -0.0, 1.0, -1.5, 100.0, 0.1, 0.1 + 0.2, 1.5, 1700000000.5, 1700000001.25, 1732912345.5,
    1796117935.8857133, 1e15, 1e16, 1e-4, 1e-5, 1.5e-05, 0.00012345, 123456789.123456789, 1e22, 1e100,
    9999999999999998.0, 12345678901234567.0, 2.0 ** 53, 2.0 ** 53 + 2, 5e-324, 1.7976931348623157e308,
    4.2e9, 3.0e-300, -2.5e-7, float("inf"), float("-inf"), float("nan"),
]
ints = [0, 1, -1, 42, 2 ** 63 - 1, -2 ** 63]
tuples = [
    ("user", "hello", 1700000000.5, None, None, None),
    ("tool", "/src/auth.py", 1700000001.25, "call_1", None, "search_files"),
    ("assistant", "it's \"quoted\"\n🙂", 1732912345.5, None, None, None),
    ("user", "\x00json:[{\"type\": \"text\"}]", 0.0, None, None, None),
    ("assistant", None, 1e16, "c", '[{"id": "c"}]', None),
    (), ("only",), (None,), (1.5, -0.0),
]
out = {
    "python": sys.version.split()[0],
    "unicode": unicodedata.unidata_version,
    "vectors": [vector(v) for v in strings + floats + ints + tuples],
}
json.dump(out, sys.stdout, indent=1)
sys.stdout.write("\n")
