"""Token secrets: generated, hashed, recognised.

A secret is ``hml_`` + 32 random bytes (``secrets.token_urlsafe``, 256 bits). It is stored and
compared only as its SHA-256 (lower-case hex). A plain hash is the right tool here, not a password
KDF (bcrypt, scrypt, argon2): those slow down guessing of low-entropy, human-chosen passwords,
while a 256-bit random secret cannot be guessed from its hash whatever the hash costs, and a
fast hash keeps each request's check cheap. The prefix makes leaked secrets easy to recognise
(secret scanners, logs).
"""

from __future__ import annotations

import hashlib
import re
import secrets

TOKEN_PREFIX = "hml_"
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def new_secret() -> str:
    """A fresh secret, shown once to whoever asked for it and never stored."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    """The SHA-256 of ``secret`` as 64 lower-case hex digits: what is stored and compared."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def is_digest(value: str) -> bool:
    """Whether ``value`` is a SHA-256 as :func:`digest` writes it."""
    return _SHA256_HEX.fullmatch(value) is not None
