"""An MCP server on stdio built with the official Python SDK (`mcp` 2.3.0), with one tool
that needs the user's confirmation: on protocol 2026-07-28 the SDK answers the first call
with an `input_required` result (an elicitation) and finishes when the client retries
`tools/call` with `inputResponses` and the `requestState` it was given.

Tool `delete_file(path)`: asks "Delete PATH?" ({"confirm": bool}); appends what it did to
the file named by AML_INPUT_AUDIT (one JSON line per finished call) and returns it.
"""
import json
import os
from typing import Annotated

from pydantic import BaseModel

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve

app = MCPServer("aml-input-required-fixture")


class Confirmation(BaseModel):
    confirm: bool


def ask(path: str) -> Elicit[Confirmation]:
    return Elicit(f"Delete {path}?", Confirmation)


@app.tool()
def delete_file(path: str, confirmation: Annotated[Confirmation, Resolve(ask)]) -> str:
    done = "deleted" if confirmation.confirm else "kept"
    audit = os.environ.get("AML_INPUT_AUDIT")
    if audit:
        with open(audit, "a") as f:
            f.write(json.dumps({"path": path, "done": done}) + "\n")
    return f"{done} {path}"


if __name__ == "__main__":
    app.run()
