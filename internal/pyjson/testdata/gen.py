#!/usr/bin/env python3
"""Regenerate the Python ground truth for pyjson's tests.

Run from this directory with CPython 3 (3.11 used): python3 gen.py
Each case directory holds cases.json, computed with the standard library
only, so the Go serializer and decoder are checked against Python itself.
"""
import json, math, os, random, struct

random.seed(20261129)


def write(case, data):
    os.makedirs(case, exist_ok=True)
    with open(os.path.join(case, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=True, indent=0)
        f.write("\n")


# floats: [float64 bits as hex, json.dumps(x)]
floats = []
specials = [0.0, -0.0, 1.0, -1.0, 0.1, 0.2, 0.1 + 0.2, 1e16, 1e15, 9999999999999998.0,
            1e-4, 1e-5, 0.0001234, 1.5e-7, 1e22, 1e100, 1e-300, 5e-324, 1.7976931348623157e308,
            1732912345.5, 1732912348.123456789, 123456789012345678.0, 2.0 ** 53, 2.0 ** 63,
            float("nan"), float("inf"), float("-inf"), 100.0, 12345.678, 1e21, 1e-7]
for x in specials:
    floats.append([struct.pack(">d", x).hex(), json.dumps(x)])
for _ in range(3000):
    bits = random.getrandbits(64)
    x = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    floats.append([struct.pack(">d", x).hex(), json.dumps(x)])
for _ in range(3000):
    x = random.uniform(-1, 1) * 10 ** random.randint(-20, 25)
    x = round(x, random.randint(0, 12))
    floats.append([struct.pack(">d", x).hex(), json.dumps(x)])
for _ in range(500):
    x = random.randint(1600000000000000, 1900000000000000) / 10 ** random.randint(0, 9)
    floats.append([struct.pack(">d", x).hex(), json.dumps(x)])
write("floats", floats)

# utf8: [bytes hex, json.dumps(bytes.decode("utf-8", "replace"))]
utf8 = []
pieces = [b"a", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\x80", b"\xbf", b"\xc0", b"\xc1",
          b"\xc2", b"\xe0", b"\xe0\x80", b"\xe0\xa0", b"\xed", b"\xed\xa0\x80", b"\xed\x9f\xbf",
          b"\xef\xbf\xbf", b"\xf0", b"\xf0\x8f", b"\xf0\x90", b"\xf0\x90\x80", b"\xf4\x8f\xbf\xbf",
          b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xfe", b"\xe2\x82", b"\xf0\x9f\x98", b" ", b"\""]
for _ in range(3000):
    b = b"".join(random.choice(pieces) for _ in range(random.randint(1, 8)))
    utf8.append([b.hex(), json.dumps(b.decode("utf-8", "replace"))])
for _ in range(1000):
    b = bytes(random.getrandbits(8) for _ in range(random.randint(1, 12)))
    utf8.append([b.hex(), json.dumps(b.decode("utf-8", "replace"))])
write("utf8", utf8)


# dumps: JSON text -> the three serializations stateguard reproduces, or an
# error when json.loads rejects the text.
def rand_str():
    alphabet = ["a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\r", "\b", "\f", "\x00", "\x01", "\x1f",
                "\x7f", "\x80", "\u00e9", "\u2028", "\u2029", "\ufeff", "\uffff", "\U0001f600", "\u4e2d", "_", "0"]
    return "".join(random.choice(alphabet) for _ in range(random.randint(0, 6)))


def rand_value(depth=0):
    r = random.random()
    if depth > 3 or r < 0.45:
        k = random.randint(0, 6)
        if k == 0:
            return None
        if k == 1:
            return random.choice([True, False])
        if k == 2:
            return random.choice([0, -1, 7, 10 ** 30, -(10 ** 25), 2 ** 63])
        if k == 3:
            return random.choice([0.5, -0.0, 1e16, 1e-5, 1732912345.5, float("nan"), float("inf"), 3.0])
        return rand_str()
    if r < 0.7:
        return [rand_value(depth + 1) for _ in range(random.randint(0, 4))]
    return {rand_str(): rand_value(depth + 1) for _ in range(random.randint(0, 5))}


def outputs(text):
    try:
        v = json.loads(text)
    except ValueError as e:
        return {"input": text, "error": type(e).__name__}
    out = {"input": text,
           "sorted": json.dumps(v, sort_keys=True, ensure_ascii=False),
           "ascii": json.dumps(v),
           "sorted_ascii": json.dumps(v, sort_keys=True)}
    return out


dumps = []
for _ in range(600):
    v = rand_value()
    text = json.dumps(v, ensure_ascii=random.random() < 0.5)
    dumps.append(outputs(text))
handmade = [
    '{"b": 1, "a": 2, "b": 3}', '{"a": -0}', '{"a": -0.0}', '[1E5, 1e+2, 2.50, 0.1e1]', '1.', '1e', '-',
    '01', '[1,]', '{"a":1,}', '"\\ud83d\\ude00"', '"\\u00E9"', '"\\x41"', '"a\tb"', "\"a\x7fb\"",
    ' {"a" : [ 1 , 2 ] } ', '{"a":1} x', 'NaN', '-Infinity', '[Infinity, -Infinity, NaN]', 'nan',
    '"\\ud800"', '"\\ud800\\u0041"', '"\\udc00\\ud800"', '\ufeff{}', '{"\u00e9": 1, "e": 2, "\U0001f600": 3, "\uffff": 4}',
    '1' * 4300, '1' * 4301, '-' + '1' * 4300, '1e400', '-1e400', '1e-400', '[[[[]]]]', '{"a":{"b":{"c":{}}}}',
    '""', '"\\/"', '"\\u0000"', '{"a": 1, "A": 2, "_": 3, "0": 4, " ": 5}', 'true', 'null', 'tru', '[1 2]',
    '{"a" 1}', '{1: 2}', '\x0c{}', '{}\x0b', '0.0000000000000000000001', '123456789012345678901234567890',
]
for text in handmade:
    dumps.append(outputs(text))
write("dumps", dumps)

# floatstr: Python float(s) on strings a timestamp may hold; null = raises.
floatstr = []
for s in ["1.5", " 1.5 ", "1_000.5", "1__0", "_1", "1_", "1.", ".5", ".", "1e5", "1e1_0", "1e", "inf", "-Infinity",
          "+nan", "NaN", "infinit", "0x10", "1,5", "", "  ", "\u20031.5\u2003", "1.5\x1c", "1e400", "-0",
          "+1.25e-3", "1_2.3_4e5_6", "1._5", "1_.5", "١٢", "abc", "12abc", "\t-7\n"]:
    try:
        f = float(s)
        floatstr.append([s, None if math.isnan(f) else repr(f), math.isnan(f)])
    except ValueError:
        floatstr.append([s, "error", False])
write("floatstr", floatstr)
