"""Official Python MCP SDK client for a gate in front of several servers: lists every page of
the tools (following nextCursor), then makes the calls given.

Usage: mcp_servers_client.py GATE_COMMAND_JSON CALLS_JSON
Prints one JSON object: the server's name and instructions from the handshake, the tool
names of each page, and per call isError, text and _meta.
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client, types


async def main() -> None:
    command = json.loads(sys.argv[1])
    calls = json.loads(sys.argv[2])
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            hello = await session.initialize()
            pages = []
            cursor = None
            for _ in range(16):
                paged = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                listed = await session.list_tools(params=paged)
                pages.append(sorted(t.name for t in listed.tools))
                cursor = listed.next_cursor
                if not cursor:
                    break
            results = []
            for call in calls:
                result = await session.call_tool(call["name"], call["arguments"])
                dumped = result.model_dump(by_alias=True, exclude_none=True)
                results.append({
                    "is_error": bool(dumped.get("isError", False)),
                    "text": "".join(c.get("text", "") for c in dumped.get("content", [])),
                    "meta": dumped.get("_meta"),
                })
    print(json.dumps({
        "server": hello.server_info.name,
        "instructions": hello.instructions,
        "pages": pages,
        "results": results,
    }))


asyncio.run(main())
