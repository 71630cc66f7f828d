"""The server's door: the API key and the body cap, checked before any body is read.

:class:`Guard` is plain ASGI middleware in front of the app. For every route but the open ones
(``/health``) it checks ``Authorization: Bearer KEY`` against the server's keys (in constant
time) and answers ``401`` without reading the body; then it reads the body itself, up to the
cap, and answers ``413`` as soon as ``Content-Length`` or the bytes received pass it. Only a
body that passed both reaches the app, so an unauthenticated or oversized body is never
parsed. It also tells the app which key a request came with (:func:`client_of`), since a
conversation belongs to the key that started it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from ratchet.serve.protocol import ApiError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN_PATHS = frozenset({"/health"})
"""Routes that answer without a key (liveness probes carry none)."""

CLIENT_STATE = "client"
"""Where the request's client (a fingerprint of its key) is kept in the ASGI scope's state."""


def key_fingerprint(key: str) -> str:
    """A short, stable name for an API key that does not reveal it (stored with conversations)."""
    return hashlib.sha256(f"ratchet-serve:{key}".encode()).hexdigest()[:16]


def client_of(scope: Scope) -> str:
    """The fingerprint of the key the request came with (``""`` when the server has none)."""
    return str(scope.get("state", {}).get(CLIENT_STATE, ""))


class Guard:
    """ASGI middleware: authenticate, then read the body within the cap, then call the app.

    Args:
        app: The app behind the door.
        keys: The API keys accepted (none: every request is let in).
        max_body_bytes: Largest body read.
    """

    def __init__(self, app: App, keys: Sequence[str], max_body_bytes: int) -> None:
        self.app = app
        self.keys = [key.encode() for key in keys]
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Let a request in, or answer it at the door."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = self._client(scope)
        if client is None:
            message = "missing or wrong API key: send the header 'Authorization: Bearer KEY'"
            error = ApiError(401, message, kind="authentication_error", code="invalid_api_key")
            await _answer(send, error)
            return
        scope.setdefault("state", {})[CLIENT_STATE] = client
        declared = _header(scope, b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            await _answer(send, self._too_large())
            return
        try:
            body = await self._body(receive)
        except _ClientGone:
            return
        if body is None:
            await _answer(send, self._too_large())
            return
        await self.app(scope, _replay(body, receive), send)

    def _client(self, scope: Scope) -> str | None:
        """The key's fingerprint (``""`` without keys or on an open route); ``None``: refused."""
        if not self.keys or scope["path"] in OPEN_PATHS:
            return ""
        scheme, _, sent = (_header(scope, b"authorization") or "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        matched = [hmac.compare_digest(sent.encode(), key) for key in self.keys]
        if not any(matched):
            return None
        return key_fingerprint(self.keys[matched.index(True)].decode())

    async def _body(self, receive: Receive) -> bytes | None:
        """The whole body, or ``None`` once it passes the cap (the rest is never read).

        Raises:
            _ClientGone: If the client disconnected before sending it all.
        """
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise _ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self) -> ApiError:
        return ApiError(
            413,
            f"the request body is larger than {self.max_body_bytes} bytes (--max-body-mb)",
            code="request_too_large",
        )


class _ClientGone(Exception):
    """The client disconnected while its body was being read."""


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1").strip()
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body once, then waits on the client (for a disconnect)."""
    delivered = False

    async def replayed() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _answer(send: Send, error: ApiError) -> None:
    """Answer with ``error`` and close the connection (the body may still be on its way)."""
    payload = json.dumps(error.body()).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
