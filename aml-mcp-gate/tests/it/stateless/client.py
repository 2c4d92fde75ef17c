"""The official Python MCP SDK client (`mcp` 2.3.0) against a Streamable HTTP URL, for the
gate's stateless HTTP tests; prints a JSON report.

Usage: client.py URL TOKEN MODE
MODE: "auto" (probe server/discover, fall back to initialize) or "legacy" (initialize only):
the negotiated protocol version, tools/list, echo, countdown (its progress notifications),
and secret (denied by the host). MODE "listen": a 2026-07-28 `subscriptions/listen` for tool
list changes, then `announce`; reports what the subscription honoured and the event that
came. MODE "regional": tools/list, then `regional` (the SDK sends `Mcp-Param-Region` for it
when the listing declares it): the listed schema and the call.
"""
import asyncio
import json
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

VERDICT = "aml.action-boundary/verdict"


def call_report(result):
    dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    meta = dict(dumped.get("_meta") or {})
    return {
        "is_error": bool(dumped.get("isError", False)),
        "text": [c.get("text") for c in dumped.get("content", [])],
        "verdict": meta.get(VERDICT),
    }


async def main():
    url, token, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    headers = {"Authorization": f"Bearer {token}"} if token else None
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "total": total, "message": message})

    async with create_mcp_http_client(headers=headers) as http:
        transport = streamable_http_client(url, http_client=http)
        if mode == "listen":
            async with Client(transport, mode="auto", cache=None) as client:
                report = {"protocol_version": client.protocol_version}
                async with client.listen(tools_list_changed=True) as sub:
                    report["honored"] = sub.honored.model_dump(by_alias=True, exclude_none=True)
                    report["announce"] = call_report(await client.call_tool("announce", {}))
                    event = await asyncio.wait_for(sub.__anext__(), 20)
                    report["event"] = type(event).__name__
            print(json.dumps(report))
            return
        if mode == "regional":
            async with Client(transport, mode="auto", cache=None) as client:
                listed = await client.list_tools()
                schema = {t.name: t.input_schema for t in listed.tools}.get("regional")
                report = {"protocol_version": client.protocol_version, "schema": schema}
                report["regional"] = call_report(
                    await client.call_tool("regional", {"region": "eu-west", "note": "hello"})
                )
            print(json.dumps(report))
            return
        async with Client(transport, mode=mode, cache=None) as client:
            report = {"protocol_version": client.protocol_version}
            listed = await client.list_tools()
            report["tools"] = sorted(t.name for t in listed.tools)
            report["echo"] = call_report(await client.call_tool("echo", {"message": "héllo"}))
            report["countdown"] = call_report(
                await client.call_tool("countdown", {"steps": 3}, progress_callback=on_progress)
            )
            report["progress"] = progress
            report["secret"] = call_report(await client.call_tool("secret", {}))
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(), 60))
