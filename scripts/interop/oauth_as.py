"""An OAuth 2.1 authorization server for the gate's OAuth tests, from the official Python MCP
SDK's auth server components (`mcp.server.auth`: RFC 8414 metadata, RFC 7591 dynamic client
registration, /authorize with its redirect-URI and PKCE checks, /token with client
authentication and the S256 code-verifier check), signing RS256 JWT access tokens with PyJWT.

The glue here only stores clients and codes in memory, asks "who are you?" on a login form
(a test's redirect handler fills it in), and puts the RFC 9068 claims into the token: `iss`,
`sub` (the login name), `aud` (the RFC 8707 `resource` the client asked for), `scope`, `exp`,
`iat`, `nbf`, `jti`, `client_id`; `kid` in the header. It also serves the public key as a
JWKS (the SDK's tokens are opaque, so it has none) and adds `jwks_uri` to the SDK's
metadata document (its model has no such member).

The SDK's token handler has no client credentials grant (RFC 6749 §4.4): it takes
authorization_code, refresh_token and jwt-bearer. For a gate that authenticates to its
upstream as itself, that one grant is glue here, in front of the SDK's /token: the client is
authenticated by the SDK's own `ClientAuthenticator` (client_secret_basic or
client_secret_post, as registered), and the token is a JWT whose `sub` is the client id.
Every other grant goes to the SDK's handler unchanged.

Usage: oauth_as.py KEY_FILE [--client ID SECRET_FILE basic|post]... [--client-token-seconds N]
Writes the private key (PEM) to KEY_FILE for the tests that forge tokens with it, prints
`oauth-as: ISSUER` on stdout once listening on a free port of 127.0.0.1, one
`oauth-as: jwks served` line on stderr per JWKS request, and one
`oauth-as: client_credentials ID TOKEN` (or `oauth-as: client_credentials refused ERROR`)
per client credentials request. `--client` preregisters a confidential client allowed the
client credentials grant; its tokens last N seconds (default 300).
"""
import argparse
import asyncio
import json
import secrets
import socket
import sys
import time
from urllib.parse import parse_qs

import jwt
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.provider import AuthorizationCode, construct_redirect_uri
from mcp.server.auth.routes import build_metadata, create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse
from starlette.requests import Request
from starlette.routing import Route

KID = "as-key-1"
TOKEN_SECONDS = 300


class Provider:
    """Storage and token minting for the SDK's handlers."""

    def __init__(self, issuer, key):
        self.issuer = issuer
        self.key = key
        self.clients = {}
        self.pending = {}
        self.codes = {}

    async def get_client(self, client_id):
        return self.clients.get(client_id)

    async def register_client(self, client_info):
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client, params):
        request = secrets.token_urlsafe(16)
        self.pending[request] = (client.client_id, params)
        return f"{self.issuer}login?request={request}"

    def login(self, request, username):
        client_id, params = self.pending.pop(request)
        code = AuthorizationCode(
            code=secrets.token_urlsafe(32),
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=username,
        )
        self.codes[code.code] = code
        return construct_redirect_uri(str(params.redirect_uri), code=code.code, state=params.state)

    async def load_authorization_code(self, client, authorization_code):
        code = self.codes.get(authorization_code)
        return code if code and code.client_id == client.client_id else None

    async def exchange_authorization_code(self, client, authorization_code):
        self.codes.pop(authorization_code.code, None)
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": authorization_code.subject,
            "scope": " ".join(authorization_code.scopes),
            "iat": now,
            "nbf": now,
            "exp": now + TOKEN_SECONDS,
            "jti": secrets.token_urlsafe(12),
            "client_id": client.client_id,
        }
        if authorization_code.resource:
            claims["aud"] = authorization_code.resource
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": KID, "typ": "at+jwt"})
        return OAuthToken(access_token=token, expires_in=TOKEN_SECONDS, scope=claims["scope"] or None)

    def client_credentials_token(self, client, scope, resource, seconds):
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": client.client_id,
            "scope": scope,
            "iat": now,
            "nbf": now,
            "exp": now + seconds,
            "jti": secrets.token_urlsafe(12),
            "client_id": client.client_id,
        }
        if resource:
            claims["aud"] = resource
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": KID, "typ": "at+jwt"})

    async def load_refresh_token(self, client, refresh_token):
        return None

    async def exchange_refresh_token(self, client, refresh_token, scopes):
        raise NotImplementedError

    async def load_access_token(self, token):
        return None

    async def revoke_token(self, token):
        pass


def token_error(status, error, description):
    print(f"oauth-as: client_credentials refused {error}", file=sys.stderr, flush=True)
    body = json.dumps({"error": error, "error_description": description}).encode()
    return status, body


def with_client_credentials(sdk_token, provider, seconds):
    """The SDK's /token (an ASGI app), with the client credentials grant answered here first."""
    authenticator = ClientAuthenticator(provider)

    async def grant(request):
        try:
            client = await authenticator.authenticate_request(request)
        except AuthenticationError as e:
            return token_error(401, "invalid_client", e.message)
        if "client_credentials" not in client.grant_types:
            return token_error(400, "unauthorized_client", "this client may not use client_credentials")
        form = await request.form()
        asked = (form.get("scope") or "").split()
        allowed = (client.scope or "").split()
        if any(s not in allowed for s in asked):
            return token_error(400, "invalid_scope", f"allowed: {' '.join(allowed)}")
        token = provider.client_credentials_token(client, " ".join(asked or allowed), form.get("resource"), seconds)
        print(f"oauth-as: client_credentials {client.client_id} {token}", file=sys.stderr, flush=True)
        body = {"access_token": token, "token_type": "Bearer", "expires_in": seconds, "scope": " ".join(asked or allowed)}
        return 200, json.dumps(body).encode()

    class App:
        """An ASGI app (a plain function would be taken for a request handler)."""

        async def __call__(self, scope, receive, send):
            await app(scope, receive, send)

    async def app(scope, receive, send):
        # The body is read once here and replayed to whichever handler takes the request.
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        if scope["method"] != "POST" or parse_qs(body.decode("latin-1")).get("grant_type") != ["client_credentials"]:
            return await sdk_token(scope, replay, send)
        status, answer = await grant(Request(scope, replay))
        headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return App()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("key_file")
    parser.add_argument("--client", nargs=3, action="append", default=[], metavar=("ID", "SECRET_FILE", "METHOD"))
    parser.add_argument("--client-token-seconds", type=int, default=TOKEN_SECONDS)
    args = parser.parse_args()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with open(args.key_file, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # With the trailing slash the SDK's metadata gives it (pydantic's URL form), so that the
    # metadata's `issuer`, the tokens' `iss` and the gate's --auth-issuer are one string.
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    issuer = base + "/"
    provider = Provider(issuer, key)
    registration = ClientRegistrationOptions(enabled=True, valid_scopes=["mcp:tools", "mcp:admin"], default_scopes=["mcp:tools"])
    for client_id, secret_file, method in args.client:
        with open(secret_file) as f:
            secret = f.read().strip()
        provider.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id,
            client_secret=secret,
            token_endpoint_auth_method=f"client_secret_{method}",
            grant_types=["client_credentials"],
            scope="mcp:tools",
        )
    routes = create_auth_routes(provider, AnyHttpUrl(issuer), client_registration_options=registration)
    routes = [
        Route(r.path, with_client_credentials(r.app, provider, args.client_token_seconds), methods=["POST", "OPTIONS"])
        if r.path == "/token" else r
        for r in routes
    ]
    # The SDK's metadata document, with the one member its model lacks.
    metadata = build_metadata(AnyHttpUrl(issuer), None, registration, RevocationOptions())
    document = {**metadata.model_dump(mode="json", exclude_none=True), "jwks_uri": f"{base}/jwks"}
    document["grant_types_supported"] = [*document.get("grant_types_supported", []), "client_credentials"]

    async def metadata_with_jwks(request):
        return JSONResponse(document)

    routes = [r for r in routes if r.path != "/.well-known/oauth-authorization-server"]
    routes.append(Route("/.well-known/oauth-authorization-server", metadata_with_jwks, methods=["GET"]))
    public = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    public.update({"kid": KID, "use": "sig", "alg": "RS256"})

    served = {"count": 0}

    async def jwks(request):
        # The count rides on the answer, so a test can read it without racing the log.
        served["count"] += 1
        print("oauth-as: jwks served", file=sys.stderr, flush=True)
        return JSONResponse({"keys": [public]}, headers={"x-jwks-served": str(served["count"])})

    async def login(request):
        if request.method == "GET":
            ask = request.query_params["request"]
            return HTMLResponse(f'<form method="post"><input type="hidden" name="request" value="{ask}"><input name="username"><button>Sign in</button></form>')
        form = await request.form()
        return RedirectResponse(provider.login(form["request"], form["username"]), status_code=302)

    routes += [Route("/jwks", jwks), Route("/login", login, methods=["GET", "POST"])]
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=routes), log_level="warning"))
    print(f"oauth-as: {issuer}", flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
