"""A stdio MCP server built with the official Python SDK (`mcp` 2.3.0), which serves protocol
2026-07-28 (`server/discover`, the per-request `_meta` envelope) as well as the handshake
era, for the gate's stateless HTTP tests.

Tools: `echo(message)`; `slow_echo(message, seconds)` (answers after a pause);
`countdown(steps)` (one progress notification per step, then "done"); with
AML_STATELESS_REGIONAL set, `regional(region, note)`, whose `region` the schema marks
`x-mcp-header: Region` (2026-07-28 then requires a matching `Mcp-Param-Region` header);
`secret()` (the host
registers it but no rule allows it: a call must never arrive); `crash()` (the process exits
without answering); `announce()` (tells 2026-07-28 subscribers that the tool list changed). Each call appends a JSON line
`{"tool": …, "arguments": …}` to the file named by AML_STATELESS_AUDIT.

`server.py` serves stdio; `server.py http PORT` serves Streamable HTTP at
http://127.0.0.1:PORT/mcp (both eras: 2026-07-28 requests by their MCP-Protocol-Version).
"""
import asyncio
import json
import os
import sys
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

app = MCPServer("aml-stateless-fixture")


def audit(tool, arguments):
    path = os.environ.get("AML_STATELESS_AUDIT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@app.tool()
def echo(message: str) -> str:
    audit("echo", {"message": message})
    return f"Echo: {message}"


@app.tool()
async def slow_echo(message: str, seconds: float) -> str:
    audit("slow_echo", {"message": message, "seconds": seconds})
    await asyncio.sleep(seconds)
    return f"Echo: {message}"


@app.tool()
async def countdown(steps: int, ctx: Context) -> str:
    audit("countdown", {"steps": steps})
    for step in range(steps):
        await ctx.report_progress(step + 1, steps, f"step {step + 1}")
        await asyncio.sleep(0.05)
    return "done"


if os.environ.get("AML_STATELESS_REGIONAL"):

    @app.tool()
    def regional(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})], note: str) -> str:
        audit("regional", {"region": region, "note": note})
        return f"{note} in {region}"


@app.tool()
def secret() -> str:
    audit("secret", {})
    return "the secret"


@app.tool()
async def announce(ctx: Context) -> str:
    audit("announce", {})
    await ctx.notify_tools_changed()
    return "announced"


@app.tool()
def crash() -> str:
    audit("crash", {})
    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
