"""Official Python MCP SDK client for the Streamable HTTP tests: connects over Streamable HTTP
(`mcp.client.streamable_http`) or stdio, runs one scenario and prints a JSON report.

Usage: mcp_http_client.py TARGET_JSON SCENARIO
TARGET_JSON: {"url": "http://127.0.0.1:PORT/mcp", "token": "..."?}  (Streamable HTTP)
          or {"command": ["program", "arg", ...]}                  (stdio)
Scenarios:
  everything  initialize, tools/list, resources, templates, prompts, completion, ping,
              tool calls (one denied by the host), progress notifications
  calls N     N echo calls in a row (a session that stays up)
  cancel      a long tool cancelled after its first progress notification; then a ping
  sampling    a tool that makes the server ask the client for sampling/createMessage (the
              client answers it)
"""
import asyncio
import json
import os
import sys
from contextlib import asynccontextmanager

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

VERDICT = "aml.action-boundary/verdict"


def dump(model):
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def call_report(result):
    dumped = dump(result)
    meta = dict(dumped.get("_meta") or {})
    verdict = meta.pop(VERDICT, None)
    rest = {k: v for k, v in dumped.items() if k != "_meta"}
    if meta:
        rest["_meta"] = meta
    return {"is_error": bool(dumped.get("isError", False)), "verdict": verdict, "without_verdict": rest}


@asynccontextmanager
async def connect(target):
    if "url" in target:
        headers = {"Authorization": f"Bearer {target['token']}"} if target.get("token") else None
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(target["url"], http_client=http) as (read, write):
                yield read, write
    else:
        command = target["command"]
        params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            yield read, write


async def everything(session, init):
    report = {
        "initialize": {
            "protocolVersion": init.protocol_version,
            "capabilities": dump(init.capabilities),
            "serverInfo": dump(init.server_info),
            "instructions": init.instructions,
        }
    }
    listed = await session.list_tools()
    report["tools"] = sorted(t.name for t in listed.tools)
    report["tool_schemas"] = {t.name: t.input_schema for t in listed.tools}
    resources = await session.list_resources()
    report["resources"] = dump(resources)
    report["resource_read"] = dump(await session.read_resource(resources.resources[0].uri))
    report["resource_templates"] = dump(await session.list_resource_templates())
    report["prompts"] = dump(await session.list_prompts())
    report["prompt_get"] = dump(await session.get_prompt("args-prompt", {"city": "Lyon", "state": "Rhône"}))
    report["completion"] = dump(
        await session.complete(
            types.PromptReference(type="ref/prompt", name="completable-prompt"),
            {"name": "department", "value": "E"},
        )
    )
    report["ping"] = dump(await session.send_ping())
    progress = []

    async def on_progress(value, total, message):
        progress.append([value, total])

    result = await session.call_tool(
        "trigger-long-running-operation", {"duration": 0.4, "steps": 4}, progress_callback=on_progress
    )
    report["long_running"] = call_report(result)
    report["progress"] = progress
    report["echo"] = call_report(await session.call_tool("echo", {"message": "héllo \u2603"}))
    report["sum"] = call_report(await session.call_tool("get-sum", {"a": 1.5, "b": 2}))
    report["structured"] = call_report(await session.call_tool("get-structured-content", {"location": "New York"}))
    report["unlisted"] = call_report(await session.call_tool("get-env", {}))
    return report


async def calls(session, count):
    results = []
    for i in range(count):
        result = await session.call_tool("echo", {"message": f"call {i}"})
        results.append(call_report(result)["without_verdict"]["content"][0]["text"])
    return {"calls": results}


async def cancel(session):
    first = anyio.Event()
    progress = []

    async def on_progress(value, total, message):
        progress.append(value)
        first.set()

    outcome = {"finished": False}

    async def call():
        await session.call_tool(
            "trigger-long-running-operation", {"duration": 3, "steps": 3}, progress_callback=on_progress
        )
        outcome["finished"] = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(20):
            await first.wait()
        tg.cancel_scope.cancel()
    # Past the time the operation would have taken: the session still works.
    await anyio.sleep(3.5)
    await session.send_ping()
    return {"progress_before_cancel": progress[:1], "finished": outcome["finished"]}


async def quiet(session):
    # One step of 2.5 s: the call's stream carries nothing for that long but keep-alives.
    progress = []

    async def on_progress(value, total, message):
        progress.append(value)

    result = await session.call_tool(
        "trigger-long-running-operation", {"duration": 2.5, "steps": 1}, progress_callback=on_progress
    )
    return {"call": call_report(result), "progress": progress}


async def main():
    target = json.loads(sys.argv[1])
    scenario = sys.argv[2]
    notifications = []
    asked = []

    async def on_sampling(context, request):
        asked.append(request.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="hi from the test client"),
            model="test-model",
        )

    async def on_message(message):
        if not isinstance(message, Exception) and hasattr(message, "method"):
            notifications.append(message.method)

    async with connect(target) as (read, write):
        callbacks = {"sampling_callback": on_sampling} if scenario == "sampling" else {}
        async with ClientSession(read, write, message_handler=on_message, **callbacks) as session:
            init = await session.initialize()
            if scenario == "everything":
                report = await everything(session, init)
            elif scenario == "sampling":
                result = await session.call_tool("trigger-sampling-request", {"prompt": "Say hi", "maxTokens": 5})
                report = {"call": call_report(result), "sampling_requests_seen": asked}
            elif scenario == "cancel":
                report = await cancel(session)
            elif scenario == "quiet":
                report = await quiet(session)
            elif scenario == "calls":
                report = await calls(session, int(sys.argv[3]))
            else:
                raise SystemExit(f"unknown scenario {scenario}")
    report["notifications"] = sorted(set(notifications))
    print(json.dumps(report))


try:
    asyncio.run(asyncio.wait_for(main(), 120))
except* httpx2.HTTPStatusError as group:
    # An HTTP refusal (401, 403, ...): reported, not a traceback.
    print(json.dumps({"http_error": [e.response.status_code for e in group.exceptions]}))
    sys.exit(3)
