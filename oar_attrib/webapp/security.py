"""ASGI middleware: a request-body size limit and security headers on every response."""
from __future__ import annotations

import asyncio
import json

# No inline scripts anywhere: every script is a file under /static, and data reaches it in
# <script type="application/json"> blocks, which are never executed. Inline *styles* are
# allowed because heatmap colours are style attributes.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
       "form-action 'self'")
# Longest wait for the next part of a request body (a half-sent body is answered 408).
BODY_READ_TIMEOUT_S = 10.0
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


async def _send_error(send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *HEADERS]})
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    """Refuse bodies over `max_bytes` with 413: by Content-Length up front, and for chunked
    bodies by reading at most `max_bytes` before the app runs (bodies here are small JSON,
    so buffering them costs nothing and keeps the app from ever seeing a partial body).
    A body whose next part does not arrive within `read_timeout` seconds is answered 408."""

    def __init__(self, app, max_bytes: int, read_timeout: float = BODY_READ_TIMEOUT_S):
        self.app, self.max_bytes, self.read_timeout = app, max_bytes, read_timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await _send_error(send, 413, f"request body larger than {self.max_bytes} bytes")
        chunks, size, more = [], 0, True
        while more:
            try:  # a client that stops sending mid-body must not hold the request forever
                message = await asyncio.wait_for(receive(), self.read_timeout)
            except asyncio.TimeoutError:
                return await _send_error(send, 408, f"request body not received within "
                                                    f"{self.read_timeout:g} s; send it at once")
            if message["type"] != "http.request":  # the client left
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                return await _send_error(send, 413, f"request body larger than {self.max_bytes} bytes")
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class SecurityHeadersMiddleware:
    """Add HEADERS to every HTTP response."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                message = {**message, "headers": headers + [h for h in HEADERS if h[0] not in present]}
            await send(message)

        await self.app(scope, receive, with_headers)
