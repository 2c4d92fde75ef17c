"""An MCP server on stdio that logs every raw line it reads and dispatches by method alone.

    python3 mcp_raw_stdin_server.py RAW_LOG RAN_LOG

Each line read from stdin is appended to RAW_LOG exactly as received (before parsing), so a
test can say what reached the server byte for byte. Messages are handled by their "method"
whether or not they carry an "id", as a lenient server does: a tools/call sent as a
notification still runs (and is appended to RAN_LOG as one JSON line), it just gets no answer;
a call whose arguments hold `"hang": true` runs and is never answered; one whose arguments
hold `"close_input": true` is answered, and then the server closes its stdin and stays alive,
reading nothing more (a server that stopped reading its input).
That is the server behind the gate bypass of issue 28, which the gate must never let such a
message reach. Both protocol eras: `initialize` and 2026-07-28's per-request `_meta` (no
handshake; `server/discover`). Standard library only.
"""

import json
import os
import sys
import time

TOOLS = [
    {"name": "send", "description": "Send a note", "inputSchema": {"type": "object"}},
    {"name": "echo", "description": "Echo the arguments", "inputSchema": {"type": "object"}},
]


def append(path, line):
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def result_for(method, params, ran_log):
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw-stdin-server", "version": "1"},
        }
    if method == "server/discover":
        return {
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw-stdin-server", "version": "1"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        append(ran_log, json.dumps({"tool": params.get("name"), "arguments": params.get("arguments")}))
        text = json.dumps(params.get("arguments"), sort_keys=True)
        return {"content": [{"type": "text", "text": text}]}
    return None


def main():
    raw_log, ran_log = sys.argv[1], sys.argv[2]
    for line in sys.stdin.buffer:
        line = line.rstrip(b"\r\n").decode("utf-8", "replace")
        append(raw_log, line)
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            continue
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        result = result_for(message["method"], params, ran_log)
        arguments = params.get("arguments")
        if "id" not in message or (isinstance(arguments, dict) and arguments.get("hang") is True):
            # No id: nothing to answer. `"hang": true` in a call's arguments: never answered.
            continue
        if result is None:
            answer = {"jsonrpc": "2.0", "id": message["id"],
                      "error": {"code": -32601, "message": "no method " + message["method"]}}
        else:
            answer = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
        if isinstance(arguments, dict) and arguments.get("close_input") is True:
            os.close(0)
            time.sleep(600)  # alive but deaf, until the gate stops it


if __name__ == "__main__":
    main()
