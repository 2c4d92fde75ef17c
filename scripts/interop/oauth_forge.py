"""Tokens for the gate's OAuth tests, signed with PyJWT: with the authorization server's own
key (as it would sign them, or with claims it would never issue) or with a key it never had.

Usage: oauth_forge.py KEY_FILE SPECS_JSON OUT_JSON
KEY_FILE: the server's private key (PEM), as oauth_as.py wrote it.
SPECS_JSON: a file with [{"name", "claims": {...}, "exp_in"?: s, "nbf_in"?: s, "kid"?: str,
  "key"?: "as" (default) | "other" | "public-as-hmac" | "none", "pad"?: bytes}]; `exp_in`
  and `nbf_in` are seconds from now. "public-as-hmac" signs HS256 with the server's public
  key (PEM) as the secret, "none" makes an unsigned `alg: none` token, "pad" appends that
  many characters to the signature (an oversized token).
Writes {name: token} to OUT_JSON.
"""
import base64
import hashlib
import hmac
import json
import sys
import time

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def part(value):
    return b64(json.dumps(value, separators=(",", ":")).encode())


def main():
    with open(sys.argv[1], "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with open(sys.argv[2]) as f:
        specs = json.load(f)
    now = int(time.time())
    tokens = {}
    for spec in specs:
        claims = dict(spec["claims"])
        claims.setdefault("iat", now)
        claims["exp"] = now + spec.get("exp_in", 300)
        if "nbf_in" in spec:
            claims["nbf"] = now + spec["nbf_in"]
        header = {"kid": spec.get("kid", "as-key-1"), "typ": "at+jwt"}
        kind = spec.get("key", "as")
        if kind == "none":
            token = f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."
        elif kind == "public-as-hmac":
            # PyJWT refuses a PEM as an HMAC secret, rightly: this is the attack it prevents.
            signing = f"{part({'alg': 'HS256', **header})}.{part(claims)}"
            mac = hmac.new(public_pem, signing.encode(), hashlib.sha256).digest()
            token = f"{signing}.{b64(mac)}"
        else:
            token = jwt.encode(claims, key if kind == "as" else other, algorithm="RS256", headers=header)
        tokens[spec["name"]] = token + "A" * spec.get("pad", 0)
    with open(sys.argv[3], "w") as f:
        json.dump(tokens, f)


if __name__ == "__main__":
    main()
