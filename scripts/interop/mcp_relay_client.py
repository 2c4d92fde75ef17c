"""Official Python MCP SDK client for the relay tests: runs one scenario against a server
command (aml-mcp-gate in front of a server, or the server alone) and prints a JSON report.

Usage: mcp_relay_client.py COMMAND_JSON SCENARIO
Scenarios:
  everything  initialize, tools/list, resources/list+read, prompts/list+get,
              completion/complete, logging/setLevel, ping, tool calls, progress notifications
  sampling    a tool that makes the server ask the client for sampling/createMessage
  cancel      a long tool cancelled after its first progress notification
  input       protocol 2026-07-28 (server/discover): a tool answers input_required; the
              client confirms and retries tools/call with inputResponses and requestState
"""
import asyncio
import json
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp import types

VERDICT = "aml.action-boundary/verdict"


def dump(model):
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def call_report(result):
    dumped = dump(result)
    meta = dumped.get("_meta") or {}
    return {
        "is_error": bool(dumped.get("isError", False)),
        "verdict": meta.get(VERDICT),
        # The result as the client sees it, less the gate's one documented addition.
        "without_verdict": {
            **{k: v for k, v in dumped.items() if k != "_meta"},
            **({"_meta": {k: v for k, v in meta.items() if k != VERDICT}} if meta.keys() - {VERDICT} else {}),
        },
    }


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
    first = resources.resources[0].uri
    report["resource_read"] = dump(await session.read_resource(first))
    templates = await session.list_resource_templates()
    report["resource_templates"] = dump(templates)
    prompts = await session.list_prompts()
    report["prompts"] = dump(prompts)
    report["prompt_get"] = dump(await session.get_prompt("args-prompt", {"city": "Lyon", "state": "Rhône"}))
    report["completion"] = dump(
        await session.complete(
            types.PromptReference(type="ref/prompt", name="completable-prompt"),
            {"name": "department", "value": "E"},
        )
    )
    await session.set_logging_level("debug")
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


async def sampling(session, init, asked):
    result = await session.call_tool("trigger-sampling-request", {"prompt": "Say hi", "maxTokens": 5})
    return {"call": call_report(result), "sampling_requests_seen": asked}


async def cancel(session, init):
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


async def input_required(session):
    discovered = await session.discover()
    first = await session.call_tool("delete_file", {"path": "/tmp/aml-report.txt"}, allow_input_required=True)
    report = {"protocol_version": session.protocol_version, "first": dump(first)}
    if not isinstance(first, types.InputRequiredResult):
        return report
    key = next(iter(first.input_requests))
    answer = types.ElicitResult(action="accept", content={"confirm": True})
    responses = {key: answer}
    retry = await session.call_tool(
        "delete_file",
        {"path": "/tmp/aml-report.txt"},
        input_responses=responses,
        request_state=first.request_state,
        allow_input_required=True,
    )
    report["input_responses"] = {key: dump(answer)}
    report["request_state"] = first.request_state
    report["retry"] = dump(retry)
    return report


async def main():
    command = json.loads(sys.argv[1])
    scenario = sys.argv[2]
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    asked = []

    async def on_sampling(context, request):
        asked.append(request.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="hi from the test client"),
            model="test-model",
        )

    notifications = []

    async def on_message(message):
        if isinstance(message, Exception):
            notifications.append(f"exception: {message}")
        else:
            notifications.append(message.method if hasattr(message, "method") else type(message).__name__)

    async def on_elicitation(context, request):
        return types.ElicitResult(action="accept", content={"confirm": True})

    async with stdio_client(params) as (read, write):
        async with ClientSession(
            read,
            write,
            sampling_callback=on_sampling,
            elicitation_callback=on_elicitation,
            message_handler=on_message,
        ) as session:
            if scenario == "input":
                print(json.dumps(await input_required(session)))
                return
            init = await session.initialize()
            if scenario == "everything":
                report = await everything(session, init)
            elif scenario == "sampling":
                report = await sampling(session, init, asked)
            elif scenario == "cancel":
                report = await cancel(session, init)
            else:
                raise SystemExit(f"unknown scenario {scenario}")
    report["notifications"] = sorted(set(n for n in notifications if "exception" not in n))
    print(json.dumps(report))


asyncio.run(main())
