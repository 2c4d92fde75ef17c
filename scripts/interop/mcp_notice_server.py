"""An MCP server on stdio built with the official Python SDK (`mcp` 2.3.0) that counts what
reaches it: tool `send_notice(to, body)` appends one JSON line per call to the file named by
AML_NOTICE_AUDIT and returns "sent to TO". A test reads that file to know whether a call
reached the server.
"""
import json
import os

from mcp.server.mcpserver import MCPServer

app = MCPServer("aml-notice-fixture")


@app.tool()
def send_notice(to: str, body: str) -> str:
    with open(os.environ["AML_NOTICE_AUDIT"], "a") as f:
        f.write(json.dumps({"to": to, "body": body}) + "\n")
    return f"sent to {to}"


if __name__ == "__main__":
    app.run()
