#!/usr/bin/env python3
"""Regenerate the expected output of recovery's JSONL golden tests.

Run from this directory: python3 gen.py. For each <case>/input.jsonl it
reads the file the way Hermes' importer does (text mode, utf-8 with
errors="replace", universal newlines, json.loads per line, Hermes' record
rules) and writes <case>/expected.json: the records with their line
numbers, identity JSON and recovery id, the chain seeded with the fixed
path below (not the file's real location, so the golden is portable).
"""
import hashlib, json, os

SEED_PATH = "/home/alice/.hermes/sessions/golden.jsonl"
DURABLE = ("finish_reason", "reasoning", "reasoning_content", "reasoning_details",
           "codex_reasoning_items", "codex_message_items", "_compressed_summary",
           "api_content", "display_kind", "display_metadata", "platform_message_id")


def has_tool_graph(obj):
    calls = obj.get("tool_calls")
    return bool((isinstance(calls, list) and calls) or obj.get("tool_call_id") or obj.get("tool_name"))


def record(obj):
    role = obj.get("role")
    if not isinstance(role, str) or not role.strip():
        return None
    content = obj.get("content")
    if content is not None and not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False, default=str)
    tools = has_tool_graph(obj)
    if content is None:
        if not tools:
            return None
    elif not str(content).strip() and not tools:
        return None
    rec = {"role": role, "content": content}
    if isinstance(obj.get("tool_calls"), list):
        rec["tool_calls"] = obj["tool_calls"]
    for key in ("tool_name", "tool_call_id"):
        if obj.get(key):
            rec[key] = obj[key]
    if obj.get("timestamp") is not None:
        rec["timestamp"] = obj["timestamp"]
    rec.update((k, obj[k]) for k in DURABLE if k in obj)
    return rec


for case in sorted(os.listdir(".")):
    src = os.path.join(case, "input.jsonl")
    if not os.path.isfile(src):
        continue
    out = {"seed": SEED_PATH, "records": []}
    digest = hashlib.sha256(SEED_PATH.encode("utf-8"))
    with open(src, "r", encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            rec = record(obj)
            if rec is None:
                continue
            identity = {k: v for k, v in rec.items() if k not in DURABLE}
            ident = json.dumps(identity, sort_keys=True, ensure_ascii=False)
            try:
                raw = ident.encode("utf-8")
            except UnicodeEncodeError:
                continue  # Hermes fails the whole import here; stateguard skips the line
            digest.update(b"\0")
            digest.update(raw)
            out["records"].append({"line": n, "identity_json": ident, "recovery_id": digest.hexdigest()})
    with open(os.path.join(case, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print(case, len(out["records"]))
