#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs into CORPUS/<target>/ from the repository's
fixtures and examples (run by scripts/fuzz; nothing here is committed as a corpus).

Usage: seeds.py REPO CORPUS
"""
import glob
import hashlib
import json
import os
import sys

repo, corpus = sys.argv[1], sys.argv[2]
seeds = {}


def add(target, data):
    if isinstance(data, str):
        data = data.encode()
    if len(data) <= 16384:
        seeds.setdefault(target, set()).add(data)


def compact(v):
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def walk(v, found):
    if isinstance(v, dict):
        if isinstance(v.get("protocol"), str):
            found.setdefault(v["protocol"], []).append(v)
        if "callRendererFunction" in v:
            found.setdefault("a2ui", []).append(v)
        if "jsonrpc" in v:
            found.setdefault("jsonrpc", []).append(v)
        for x in v.values():
            walk(x, found)
    elif isinstance(v, list):
        for x in v:
            walk(x, found)


files = sorted(glob.glob(f"{repo}/fixtures/**/*.json", recursive=True)
               + glob.glob(f"{repo}/examples/**/*.json", recursive=True))
found = {}
for path in files:
    raw = open(path, "rb").read()
    add("strict_canonical", raw)
    try:
        doc = json.loads(raw)
    except ValueError:
        continue
    walk(doc, found)
    # Every member of a fixture's top-level object or array, as a document of its own.
    items = doc.values() if isinstance(doc, dict) else doc if isinstance(doc, list) else []
    for item in items:
        add("strict_canonical", compact(item))

policies = [compact(p) for p in found.get("aml-action-policy/1", [])]
proposals = [compact(p) for p in found.get("aml-proposed-action/1", [])]
for p in policies:
    add("policy", p)
for i, p in enumerate(proposals):
    add("strict_canonical", p)
    add("plan", p.encode() + b"\xff" + policies[i % len(policies)].encode())
for name in ("tools.json",):
    add("catalog", open(f"{repo}/examples/{name}", "rb").read())
for m in found.get("a2ui", []):
    add("a2ui", compact(m))
for name in ("statement.json", "keyring.json", "example-approver.key"):
    add("statement", open(f"{repo}/examples/approval/{name}", "rb").read())

for t in ("1S", "99999999H", "0n", "5m", "250u", "7M", "100000000S", "1s", "-1S", ""):
    add("grpc_timeout", t)
    add("grpc_call", t.encode() + b'\xffsend\xff{"to":"team","n":1.50}')
add("grpc_call", b'\xffsend\xff{"to":"team","to":"x"}')
add("grpc_call", b'1m\xffsend\xff{"to":"\\ud800"}')
add("grpc_call", b'\xffnope\xff{"to":"team"}')
# grpc_gate_decode: a type-picking byte, then a message of the test API (payments.proto).
for pick in range(8):
    add("grpc_gate_decode", bytes([pick]) + b"\x0a\x03A-1\x10\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x1a\x01x")
    add("grpc_gate_decode", bytes([pick]) + b"\x0a\x03A-1\x10\x80\x01\x1a\x0a\x0a\x08e@x.test")

client = [
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}',
    '{"jsonrpc":"2.0","method":"notifications/initialized"}',
    '{"jsonrpc":"2.0","id":2,"method":"tools/list"}',
    '{"jsonrpc":"2.0","id":"c3","method":"tools/call","params":{"name":"send","arguments":{"to":"team"}}}',
    '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"send","arguments":{"to":"other"}}}',
    '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}',
    '{"jsonrpc":"2.0","id":5,"result":{}}',
    '[{"jsonrpc":"2.0","id":6,"method":"ping"},{"jsonrpc":"2.0","method":"n"}]',
    '{"jsonrpc":"2.0","id":7,"method":"ping","id":8}',
    'not json',
]
add("relay_client", "\n".join(client))
for line in client:
    add("relay_client", line)
for m in found.get("jsonrpc", []):
    add("relay_client", compact(m))

upstream = [
    '{"jsonrpc":"2.0","id":@ID,"result":{"resources":[],"content":[{"type":"text","text":"ok"}]}}',
    '{"jsonrpc":"2.0","id":@ID,"error":{"code":-32601,"message":"no"}}',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}',
    '{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}',
    '{"jsonrpc":"2.0","id":@ID,"method":"initialize"}',
    '["2.0",@ID,null,null,{"resources":[]}]',
    '{"jsonrpc":"2.0","id":@ID,"result":{"content":[]},"id":@ID}',
    '{"jsonrpc":"2.0","id":@ID}',
    'garbage @ID',
]
add("relay_upstream", "\n".join(upstream))
for line in upstream:
    add("relay_upstream", line)

# The session core: client lines as they are, server lines after `s`, the clock after `t`.
machine = client[:4] + ["s" + line for line in upstream[:5]] + ["t\x1f", "g", '{"jsonrpc":"2.0","id":9,"method":"ping"}', "d"]
add("relay_machine", "\n".join(machine))
add("relay_machine", "\n".join([client[2], "s" + upstream[0], client[2], "t\x1f", "s" + upstream[0]]))
# Checked calls whose futures send (`c`), are dropped first (`k`), time out (`x`) and end (`e`).
call = '{"jsonrpc":"2.0","id":"c%d","method":"tools/call","params":{"name":"send","arguments":{"to":"team"}}}'
cancel = '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c%d"}}'
add("relay_machine", "\n".join([call % 1, call % 2, call % 3, "c", "k", "s" + upstream[0], "c", cancel % 3, "x", "e", "e", call % 1, "g", "c", "e"]))
# A session of endpoints only (`E`): endpoints open (`o`, streaming when the byte has 0x10),
# send under the same id (`p`), get progress under the relay's token and answers, close (`q`).
ask = '{"jsonrpc":"2.0","id":5,"method":"prompts/get","params":{"_meta":{"progressToken":"t"}}}'
progress = '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"aml-progress-1","progress":1}}'
add("relay_machine", "\n".join(["E", "o\x10", "p\x00" + ask, "o\x01", "p\x01" + ask, "s" + progress,
                                 "s" + upstream[0], "q\x00", "q\x01", "s" + upstream[3], "p\x02" + call % 1, "c", "q\x02"]))
# One client's endpoints (a Streamable HTTP session): the same events, its ids and tokens shared.
add("relay_machine", "\n".join(["o\x10", "p\x00" + ask, "o\x01", "p\x01" + ask, "s" + progress.replace("aml-progress-1", "t"),
                                 "s" + upstream[0], "q\x00", "q\x01", "s" + upstream[3], "p\x02" + call % 1, "c", "q\x02"]))
# Two servers (`M`): both ask the client under one id, each is answered; calls go to each
# (`c`, `C`), one server goes (`G`) while the other answers (`s`).
sampled = '{"jsonrpc":"2.0","id":"aml-server-request-%d","result":{}}'
init = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}'
add("relay_machine", "\n".join(["M", init, "S" + upstream[0], "t\x1f", init, "s" + upstream[1], "S" + upstream[0],
                                 '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}']))
add("relay_machine", "\n".join(["M", "s" + upstream[3], "S" + upstream[3], sampled % 1, sampled % 2,
                                 call % 1, call % 2, "c", "C", "S" + upstream[0], "G", "s" + upstream[0],
                                 '{"jsonrpc":"2.0","method":"notifications/initialized"}', "e", "e"]))

for target, items in sorted(seeds.items()):
    out = os.path.join(corpus, target)
    os.makedirs(out, exist_ok=True)
    for data in items:
        name = "seed-" + hashlib.sha1(data).hexdigest()
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"seeds: {target}: {len(items)}", file=sys.stderr)
