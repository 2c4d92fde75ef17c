"""Official Python MCP SDK client, calling tools through aml-mcp-gate.

Usage: mcp_client.py GATE_COMMAND_JSON CALLS_JSON
Prints one JSON object: the tool names listed and, per call, isError, text and _meta.
A call written {"create": PATH, "content": TEXT} is not sent: the client writes the file
itself at that point of the session (a file that appears after the gate started).
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client


async def main() -> None:
    command = json.loads(sys.argv[1])
    calls = json.loads(sys.argv[2])
    # SDK stdio clients pass only a few variables unless told to: pass them all.
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            results = []
            for call in calls:
                if "create" in call:
                    with open(call["create"], "w", encoding="utf-8") as f:
                        f.write(call["content"])
                    continue
                result = await session.call_tool(call["name"], call["arguments"])
                dumped = result.model_dump(by_alias=True, exclude_none=True)
                results.append({
                    "is_error": bool(dumped.get("isError", False)),
                    "text": "".join(c.get("text", "") for c in dumped.get("content", [])),
                    "meta": dumped.get("_meta"),
                })
    print(json.dumps({"tools": sorted(t.name for t in listed.tools), "results": results}))


asyncio.run(main())
