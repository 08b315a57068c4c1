#!/usr/bin/env python3
"""Writes vectors.json: diverted JSONL lines and, for each, the messages
row Hermes' append_message writes for it (every column it binds), the
display_identity Hermes computes, and whether stateguard writes that
identity or leaves NULL for Hermes to fill in. Our own code, following
hermes_state_messages.py's rules as hermes-compat.md describes them; run
once with the machine's Python 3.11:

    python3 gen_vectors.py > vectors.json

Column values are tagged: {"s": text}, {"f": float.hex()}, {"i": "n"},
{"b": hex}, {"none": true}. display_metadata holds @RID@ where the line's
recovery id goes (it depends on the JSONL's path).
"""
import hashlib
import json
import sys

NOW = object()  # the timestamp is "now": out of Hermes' sane window

lines = [
    {"role": "user", "content": "hello", "timestamp": 1700000000.5},
    {"role": "tool", "content": "/src/auth.py", "tool_name": "search_files", "tool_call_id": "call_1",
     "timestamp": 1700000001.25},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_2", "type": "function", "function": {"name": "calc", "arguments": "{\"x\": 1}"}},
        {"id": "call_3", "type": "function", "function": {"name": "grep", "arguments": "{}"}}],
     "finish_reason": "tool_calls", "timestamp": 1700000002.0},
    {"role": "assistant", "content": "it's \"quoted\"\nand 🙂 ünïcödé", "finish_reason": "stop",
     "reasoning": "thinking…", "reasoning_content": "rc", "reasoning_details": [{"type": "summary", "text": "é"}],
     "codex_reasoning_items": [{"id": "r1"}], "codex_message_items": "raw text kept",
     "platform_message_id": "pm-1", "api_content": "exact api text", "display_kind": "hidden",
     "display_metadata": {"source": "slack", "n": 1}, "timestamp": 1700000003.125},
    {"role": "user", "content": "negative zero", "timestamp": -0.0},
    {"role": "user", "content": "string timestamp", "timestamp": "1700000100.5"},
    {"role": "user", "content": "integer timestamp", "timestamp": 1700000200},
    {"role": "user", "content": "[CONTEXT COMPACTION — REFERENCE ONLY] earlier turns...\n\nREAL ASK",
     "display_kind": "hidden", "timestamp": 1700000300.5},
    {"role": "user", "content": [{"type": "text", "text": "structured"}, {"type": "image_url", "image_url": {"url": "x"}}],
     "timestamp": 1700000400.5},
    {"role": "user", "content": "hello", "timestamp": 1700000000.5},
    {"role": "user", "content": "tab\there \x01 \u2028 \U0001f9d1\u200d\U0001f4bb", "timestamp": 1700000500.75},
    {"role": "assistant", "content": "summary of the earlier turns", "_compressed_summary": True,
     "timestamp": 1700000600.5},
    {"role": "user", "content": "new in Unicode 15: \U0001faf8", "timestamp": 1700000700.5},
    {"role": "assistant", "content": "no calls after all", "tool_calls": [], "timestamp": 1700000800.5},
    {"role": "assistant", "content": "answering a call", "tool_call_id": "call_9", "timestamp": 1700000900.5},
    {"role": "system", "content": "you are helpful", "timestamp": 1700001000.5},
    {"role": "user", "content": "small float", "timestamp": 1e-05},
]

MARKERS = ("CONTEXT COMPACTION", "CONTEXT SUMMARY", "PRIOR CONTEXT")


def tag(v):
    if v is None:
        return {"none": True}
    if isinstance(v, bool):
        return {"i": str(int(v))}
    if isinstance(v, float):
        return {"f": v.hex()}
    if isinstance(v, int):
        return {"i": str(v)}
    if isinstance(v, bytes):
        return {"b": v.hex()}
    return {"s": v}


def coerce(ts):
    try:
        f = float(ts)
    except (TypeError, ValueError):
        return None
    if not (0.0 <= f <= 4_200_000_000.0):
        return None
    return 0.0 if f == 0.0 else f


def row(line):
    # What the diverted import hands append_message: content as text
    # (non-text as its JSON), tool_calls only a list, ids when truthy.
    content = line.get("content")
    if content is not None and not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    calls = line.get("tool_calls") if isinstance(line.get("tool_calls"), list) else None
    ts = coerce(line.get("timestamp"))
    rjson = lambda v: None if not v else (v if isinstance(v, str) else json.dumps(v))
    meta = dict(line.get("display_metadata") or {})
    meta["diverted_recovery_id"] = "@RID@"
    cols = {
        "role": line["role"], "content": content, "tool_call_id": line.get("tool_call_id") or None,
        "tool_calls": json.dumps(calls) if calls else None, "tool_name": line.get("tool_name") or None,
        "effect_disposition": None, "timestamp": ts, "token_count": None,
        "finish_reason": line.get("finish_reason"), "reasoning": line.get("reasoning"),
        "reasoning_content": line.get("reasoning_content"),
        "reasoning_details": rjson(line.get("reasoning_details")),
        "codex_reasoning_items": rjson(line.get("codex_reasoning_items")),
        "codex_message_items": rjson(line.get("codex_message_items")),
        "platform_message_id": line.get("platform_message_id") or None, "observed": 0,
        "_compressed_summary": 1 if line.get("_compressed_summary") else 0, "active": 1, "compacted": 0,
        "api_content": line.get("api_content") if isinstance(line.get("api_content"), str) else None,
        "display_kind": line.get("display_kind") if isinstance(line.get("display_kind"), str) else None,
        "display_metadata": json.dumps(meta),
    }
    key = (cols["role"], cols["content"], ts, cols["tool_call_id"], cols["tool_calls"], cols["tool_name"])
    ident = hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).digest()
    # stateguard writes it only where the rule is known exactly.
    plain = (cols["role"] in ("user", "assistant") and isinstance(content, str) and
             key[3:] == (None, None, None) and not cols["_compressed_summary"] and
             not (cols["role"] == "user" and any(m in content.upper() for m in MARKERS)) and
             "\U0001faf8" not in content)
    cols["display_identity"] = ident if plain else None
    n_calls = 0 if calls is None else len(calls)
    return {"line": json.dumps(line, ensure_ascii=False),
            "columns": {k: tag(v) for k, v in cols.items()},
            "hermes_identity": ident.hex(), "tool_calls": n_calls}


out = [row(l) for l in lines]
json.dump({"python": sys.version.split()[0], "rows": out,
           "message_count": len(out), "tool_call_count": sum(r["tool_calls"] for r in out)},
          sys.stdout, indent=1, ensure_ascii=False)
sys.stdout.write("\n")
