"""Official Python MCP SDK client over Streamable HTTP (`mcp.client.streamable_http`) in front
of several gates at once, for the replica tests: opens one session per URL, then sends N
identical tools/call requests at once, alternating between the sessions, and prints a JSON
report: {"results": [{"target": INDEX, "is_error": bool, "verdict": the gate's verdict}]}.

Usage: mcp_replicas_client.py URLS_JSON N TOOL ARGUMENTS_JSON
URLS_JSON: a list of "http://..." or {"url": "http://...", "token": "..."} (a bearer token).
AML_CLIENT_NAME and AML_CLIENT_VERSION, when set, are the clientInfo its initialize sends.
"""
import asyncio
import json
import os
import sys
from contextlib import AsyncExitStack

from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

VERDICT = "aml.action-boundary/verdict"


async def main():
    urls = json.loads(sys.argv[1])
    count = int(sys.argv[2])
    tool = sys.argv[3]
    arguments = json.loads(sys.argv[4])
    async with AsyncExitStack() as stack:
        sessions = []
        for target in urls:
            if isinstance(target, str):
                target = {"url": target}
            token = target.get("token")
            headers = {"Authorization": f"Bearer {token}"} if token else None
            http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
            read, write, *_ = await stack.enter_async_context(
                streamable_http_client(target["url"], http_client=http)
            )
            info = None
            if os.environ.get("AML_CLIENT_NAME"):
                info = types.Implementation(
                    name=os.environ["AML_CLIENT_NAME"], version=os.environ.get("AML_CLIENT_VERSION", "")
                )
            session = await stack.enter_async_context(ClientSession(read, write, client_info=info))
            await session.initialize()
            sessions.append(session)

        async def call(index):
            target = index % len(sessions)
            result = await sessions[target].call_tool(tool, arguments)
            dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
            return {
                "target": target,
                "is_error": bool(dumped.get("isError", False)),
                "verdict": (dumped.get("_meta") or {}).get(VERDICT),
            }

        results = await asyncio.gather(*(call(i) for i in range(count)))
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    asyncio.run(main())
