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

Usage: oauth_as.py KEY_FILE
Writes the private key (PEM) to KEY_FILE for the tests that forge tokens with it, prints
`oauth-as: ISSUER` on stdout once listening on a free port of 127.0.0.1, and one
`oauth-as: jwks served` line on stderr per JWKS request.
"""
import asyncio
import secrets
import socket
import sys
import time

import jwt
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp.server.auth.provider import AuthorizationCode, construct_redirect_uri
from mcp.server.auth.routes import build_metadata, create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse
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

    async def load_refresh_token(self, client, refresh_token):
        return None

    async def exchange_refresh_token(self, client, refresh_token, scopes):
        raise NotImplementedError

    async def load_access_token(self, token):
        return None

    async def revoke_token(self, token):
        pass


async def main():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with open(sys.argv[1], "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # With the trailing slash the SDK's metadata gives it (pydantic's URL form), so that the
    # metadata's `issuer`, the tokens' `iss` and the gate's --auth-issuer are one string.
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    issuer = base + "/"
    provider = Provider(issuer, key)
    registration = ClientRegistrationOptions(enabled=True, valid_scopes=["mcp:tools", "mcp:admin"], default_scopes=["mcp:tools"])
    routes = create_auth_routes(provider, AnyHttpUrl(issuer), client_registration_options=registration)
    # The SDK's metadata document, with the one member its model lacks.
    metadata = build_metadata(AnyHttpUrl(issuer), None, registration, RevocationOptions())
    document = {**metadata.model_dump(mode="json", exclude_none=True), "jwks_uri": f"{base}/jwks"}

    async def metadata_with_jwks(request):
        return JSONResponse(document)

    routes = [r for r in routes if r.path != "/.well-known/oauth-authorization-server"]
    routes.append(Route("/.well-known/oauth-authorization-server", metadata_with_jwks, methods=["GET"]))
    public = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    public.update({"kid": KID, "use": "sig", "alg": "RS256"})

    async def jwks(request):
        print("oauth-as: jwks served", file=sys.stderr, flush=True)
        return JSONResponse({"keys": [public]})

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
