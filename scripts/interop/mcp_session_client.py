"""Official Python MCP SDK client (`mcp` 2.3.0) that keeps one session open and takes its
orders from stdin, so a test can change things between calls (a policy reload, an approval).

Usage: mcp_session_client.py COMMAND_JSON
Reads one JSON object per line on stdin: {"call": TOOL, "arguments": {...}}, optionally with
"times": N (N identical calls at once, answered as {"results": [...]}); answers each with
one JSON line on stdout: {"is_error": bool, "text": the first text content, "verdict": the
gate's verdict from _meta, or null}. {"list": true} answers {"tools": [each listed tool as the
SDK read it, in wire form]}. Prints {"ready": true} once the session is initialized.
The server's (and the gate's) stderr passes through to this process's stderr.
"""
import asyncio
import json
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

VERDICT = "aml.action-boundary/verdict"


def say(obj):
    print(json.dumps(obj), flush=True)


async def main():
    command = json.loads(sys.argv[1])
    # The whole environment: the server under test reads its settings from it.
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            say({"ready": True})
            while True:
                line = await anyio.to_thread.run_sync(sys.stdin.readline)
                if not line:
                    return
                order = json.loads(line)
                if order.get("list"):
                    listed = await session.list_tools()
                    tools = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in listed.tools]
                    say({"tools": tools})
                    continue
                call = lambda: session.call_tool(order["call"], order.get("arguments", {}))
                if "times" in order:
                    results = await asyncio.gather(*(call() for _ in range(order["times"])))
                    say({"results": [report(r) for r in results]})
                else:
                    say(report(await call()))


def report(result):
    dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    texts = [c.get("text") for c in dumped.get("content", []) if c.get("type") == "text"]
    return {
        "is_error": bool(dumped.get("isError", False)),
        "text": texts[0] if texts else None,
        "verdict": (dumped.get("_meta") or {}).get(VERDICT),
    }


if __name__ == "__main__":
    anyio.run(main)
