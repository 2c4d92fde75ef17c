"""The official Python MCP SDK client against an OAuth-protected gate, for the OAuth tests.

Usage:
  mcp_oauth_client.py oauth URL SUBJECT TOOL ARGUMENTS_JSON [CALLS PAUSE_SECONDS]
      Connects with the SDK's own OAuth support (`mcp.client.auth.OAuthClientProvider`): the
      gate's 401 names its protected resource metadata, which names the authorization
      server; the SDK registers a client dynamically and runs authorization code + PKCE. The
      redirect handler plays the user's browser: it follows the authorization URL to the
      server's login form and signs in as SUBJECT; the callback handler hands the SDK the code
      from the redirect. Then one tools/call (or CALLS of them, PAUSE_SECONDS apart). Prints
      {"verdict": …, "is_error": … (of the first call), "calls": [{"verdict", "is_error"}…],
      "token_claims": the access token's claims (read unverified, for the test to compare),
      "access_token": the token itself (for a test to look for it where it must not be)};
      or, when the session fails (initialize or a call answered with an error),
      {"error": what the SDK raised, "access_token": …}.
  mcp_oauth_client.py probe URL TOKENS_JSON
      Raw Streamable HTTP requests (httpx2, the SDK's HTTP client): for each {"name", "token",
      "body"?} of TOKENS_JSON one POST of a JSON-RPC message with that bearer token; prints
      [{"name", "status", "www_authenticate", "session"}] (`session`: the Mcp-Session-Id the
      gate gave). A token of null sends no Authorization header.
"""
import asyncio
import base64
import json
import sys
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
from mcp import ClientSession
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientMetadata

VERDICT = "aml.action-boundary/verdict"
REDIRECT = "http://127.0.0.1:9/callback"


class Memory:
    """Token storage: this process only."""

    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


def claims_of(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def call_report(result):
    dumped = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return {"is_error": bool(dumped.get("isError", False)), "verdict": (dumped.get("_meta") or {}).get(VERDICT)}


async def oauth(url, subject, tool, arguments, calls=1, pause=0.0):
    redirected = {}

    async def redirect_handler(authorization_url):
        # The user's browser: the login form, then the redirect back with the code.
        async with httpx2.AsyncClient() as browser:
            answer = await browser.get(authorization_url)
            assert answer.status_code in (302, 303, 307), f"authorize answered {answer.status_code}: {answer.text}"
            login = urljoin(authorization_url, answer.headers["location"])
            form = await browser.get(login)
            assert form.status_code == 200, form.text
            request = parse_qs(urlparse(login).query)["request"][0]
            signed_in = await browser.post(login, data={"request": request, "username": subject})
            assert signed_in.status_code in (302, 303), signed_in.text
            back = signed_in.headers["location"]
            assert back.startswith(REDIRECT), back
            query = parse_qs(urlparse(back).query)
            redirected["code"] = query["code"][0]
            redirected["state"] = query.get("state", [None])[0]

    async def callback_handler():
        return AuthorizationCodeResult(code=redirected["code"], state=redirected["state"])

    storage = Memory()
    auth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="aml-oauth-test",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    reports = []
    try:
        async with create_mcp_http_client(auth=auth) as http:
            async with streamable_http_client(url, http_client=http) as (read, write, *_):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    for n in range(calls):
                        if n:
                            await asyncio.sleep(pause)
                        reports.append(call_report(await session.call_tool(tool, arguments)))
    except Exception as e:  # noqa: BLE001 - the report says what the SDK raised
        while isinstance(e, BaseExceptionGroup) and e.exceptions:
            e = e.exceptions[0]
        token = storage.tokens.access_token if storage.tokens else None
        return {"error": f"{type(e).__name__}: {e}", "calls": reports, "access_token": token}
    return {
        **reports[0],
        "calls": reports,
        "token_claims": claims_of(storage.tokens.access_token),
        "access_token": storage.tokens.access_token,
    }


async def probe(url, tokens):
    report = []
    async with httpx2.AsyncClient(timeout=30) as http:
        for probe in tokens:
            headers = {
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
                "MCP-Protocol-Version": "2025-06-18",
            }
            if probe.get("token") is not None:
                headers["Authorization"] = f"Bearer {probe['token']}"
            headers.update(probe.get("headers", {}))
            body = probe.get("body") or {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
            }
            try:
                answer = await http.post(url, headers=headers, content=json.dumps(body))
                status, challenge = answer.status_code, answer.headers.get("www-authenticate")
                session, text = answer.headers.get("mcp-session-id"), answer.text
            except httpx2.HTTPError as e:
                status, challenge, session, text = None, None, None, f"{type(e).__name__}: {e}"
            report.append({"name": probe["name"], "status": status, "www_authenticate": challenge, "session": session, "text": text[:300]})
    return report


def main():
    mode = sys.argv[1]
    if mode == "oauth":
        calls, pause = (int(sys.argv[6]), float(sys.argv[7])) if len(sys.argv) > 7 else (1, 0.0)
        report = asyncio.run(oauth(sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5]), calls, pause))
    elif mode == "probe":
        with open(sys.argv[3]) as f:
            report = asyncio.run(probe(sys.argv[2], json.load(f)))
    else:
        sys.exit(f"unknown mode {mode}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
