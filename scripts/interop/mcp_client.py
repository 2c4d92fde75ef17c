"""Official Python MCP SDK client, calling tools through aml-mcp-gate.

Usage: mcp_client.py GATE_COMMAND_JSON CALLS_JSON
GATE_COMMAND_JSON is the gate's command line (a JSON array: the client starts it and speaks
stdio), or {"url": "http://HOST:PORT/mcp", "token": ...?} for a gate already listening
(Streamable HTTP).
Prints one JSON object: the server's name and instructions from the handshake, the tool
names listed (all pages, and each page's), and per call isError, text and _meta.
A call written {"create": PATH, "content": TEXT} is not sent: the client writes the file
itself at that point of the session (a file that appears after the gate started).
{"list": "prompts"|"resources"|"templates"} walks every page of that list (its names or
URIs, per page); {"prompt": NAME, "arguments": {...}} gets a prompt and {"read": URI} reads
a resource (each reported as its text). A tool call with "progress": true asks for progress
and reports the progress values it got, in order.
{"complete": {"prompt": NAME} | {"template": URI}, "argument": {"name": N, "value": V}} asks
for completions (reported as their values). {"cancel": NAME, "arguments": {...}} calls a tool
that reports progress and cancels the call at its first progress (the SDK then tells the
server); reported as the progress seen and whether the call finished anyway.
{"kill": PID_FILE} kills (SIGKILL) the process whose id the file holds, waits until it is
gone and a moment more, and reports {"killed": PID}.
"""
import asyncio
import json
import os
import signal
import sys
import time
from contextlib import asynccontextmanager

import anyio

from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


@asynccontextmanager
async def connect(target):
    if isinstance(target, dict):
        headers = {"Authorization": f"Bearer {target['token']}"} if target.get("token") else None
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(target["url"], http_client=http) as (read, write):
                yield read, write
        return
    # SDK stdio clients pass only a few variables unless told to: pass them all.
    params = StdioServerParameters(command=target[0], args=target[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        yield read, write


async def walk(session: ClientSession, what: str) -> list:
    """Every page of prompts, resources or resource templates: each page's names or URIs."""
    pages = []
    cursor = None
    for _ in range(16):
        paged = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        if what == "prompts":
            listed = await session.list_prompts(params=paged)
            pages.append([p.name for p in listed.prompts])
        elif what == "resources":
            listed = await session.list_resources(params=paged)
            pages.append([str(r.uri) for r in listed.resources])
        else:
            listed = await session.list_resource_templates(params=paged)
            pages.append([t.uri_template for t in listed.resource_templates])
        cursor = listed.next_cursor
        if not cursor:
            break
    return pages


async def complete(session: ClientSession, order: dict) -> dict:
    ref = order["complete"]
    if "prompt" in ref:
        reference = types.PromptReference(type="ref/prompt", name=ref["prompt"])
    else:
        reference = types.ResourceTemplateReference(type="ref/resource", uri=ref["template"])
    done = await session.complete(reference, order["argument"])
    return {"values": done.completion.values}


async def cancel_at_first_progress(session: ClientSession, order: dict) -> dict:
    first = anyio.Event()
    progress = []
    finished = {"finished": False}

    async def on_progress(done, total, message):
        progress.append(done)
        first.set()

    async def call():
        await session.call_tool(order["cancel"], order["arguments"], progress_callback=on_progress)
        finished["finished"] = True

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        with anyio.fail_after(20):
            await first.wait()
        group.cancel_scope.cancel()
    return {"progress": progress[:1], "finished": finished["finished"]}


async def kill(pid_file: str) -> dict:
    with open(pid_file, encoding="utf-8") as f:
        pid = int(f.read().strip())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.05)
    # The gate learns of the exit from the server's closed pipes: a moment.
    await asyncio.sleep(0.5)
    return {"killed": pid}


async def main() -> None:
    target = json.loads(sys.argv[1])
    calls = json.loads(sys.argv[2])
    async with connect(target) as (read, write):
        async with ClientSession(read, write) as session:
            hello = await session.initialize()
            # Every page, as a client that follows nextCursor sees them (a gate in front of
            # several servers gives one page per server).
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
                if "list" in call:
                    results.append({"pages": await walk(session, call["list"])})
                    continue
                if "prompt" in call:
                    got = await session.get_prompt(call["prompt"], call.get("arguments"))
                    texts = [m.content.text for m in got.messages if getattr(m.content, "text", None)]
                    results.append({"text": "".join(texts)})
                    continue
                if "complete" in call:
                    results.append(await complete(session, call))
                    continue
                if "kill" in call:
                    results.append(await kill(call["kill"]))
                    continue
                if "cancel" in call:
                    results.append(await cancel_at_first_progress(session, call))
                    continue
                if "read" in call:
                    read = await session.read_resource(call["read"])
                    results.append({"text": "".join(getattr(c, "text", "") or "" for c in read.contents)})
                    continue
                if "create" in call:
                    with open(call["create"], "w", encoding="utf-8") as f:
                        f.write(call["content"])
                    continue
                progress = []

                async def on_progress(done, total, message):
                    progress.append(done)

                watch = on_progress if call.get("progress") else None
                result = await session.call_tool(call["name"], call["arguments"], progress_callback=watch)
                dumped = result.model_dump(by_alias=True, exclude_none=True)
                results.append({
                    "is_error": bool(dumped.get("isError", False)),
                    "text": "".join(c.get("text", "") for c in dumped.get("content", [])),
                    "meta": dumped.get("_meta"),
                    "progress": progress,
                })
    print(json.dumps({
        "server": hello.server_info.name,
        "instructions": hello.instructions,
        "tools": sorted(name for page in pages for name in page),
        "pages": pages,
        "results": results,
    }))


asyncio.run(main())
