"""What every request meets before any route runs: authentication, a rate limit, a body limit.

:class:`Guard` is a plain ASGI middleware. For every request it

1. checks the bearer token against the path's project (or the admin token for
   ``POST /projects``) from the headers alone, so an anonymous client cannot make
   the server read, buffer or parse a body (401 / 403);
2. applies a token bucket per token (per client address for requests without a
   valid token, counted *before* their 401, and for a token this replica has not
   checked within ``token_cache_seconds``, counted before its store lookup and given
   back when it is valid): ``rate_limit_per_second`` with bursts of ``rate_limit_burst``,
   and ``create_project_per_minute`` (bursts of 10) per client address for
   ``POST /projects``, answering 429 ``rate_limited`` with ``Retry-After``;
3. reads the body itself, refusing it with 413 ``payload_too_large`` as soon as
   ``Content-Length`` or the bytes received pass ``max_body_bytes`` (nothing more is
   read), and with 408 ``request_timeout`` when the whole body has not arrived
   within ``body_timeout_seconds`` (a client that stalls its body holds no
   connection beyond that).

The route's own dependencies check the token again (from the same short-lived cache).
"""

from __future__ import annotations

import hmac
import json
import math
import re
import threading
import time
from typing import Any
from urllib.parse import unquote

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.api.errors import RETRY_AFTER_SECONDS, error_body
from services.lru import LRU
from services.store import repository as repo

__all__ = ["Guard", "admin_token_ok"]


_PROJECT_PATH = re.compile(r"^/projects/([^/]+)(?:/.*)?$")
#: the gold routes (services/api/routes/gold.py): with an admin token set, only it opens them
_GOLD_PATH = re.compile(r"^/projects/[^/]+/gold(?:/scores)?/?$")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def admin_token_ok(expected: str | None, given: str | None) -> bool:
    """Whether ``given`` is the admin token (constant-time; no admin token set: anyone)."""
    if not expected:
        return True
    if given is None:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


def bearer(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"authorization":
            text = value.decode("latin-1").strip()
            scheme, _, credentials = text.partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                return credentials.strip()
            return None
    return None


#: the cookie in which a browser page keeps its token: a ``?token=`` visit of a page sets
#: it, scoped to that page's path (:mod:`services.api.routes.dashboard`)
PAGE_TOKEN_COOKIE = "evalset_token"


def scope_page_token(scope: Scope) -> str | None:
    """The token of a GET from a browser page, read from the raw ASGI scope (for the
    guard, before any route runs): ``?token=``, else the page's cookie.

    The bearer header is the caller's to check first (:func:`bearer`);
    :func:`services.api.deps.request_page_token` is this lookup on a ``Request``, bearer
    header first.
    """
    from http.cookies import SimpleCookie
    from urllib.parse import parse_qs

    query: str = scope.get("query_string", b"").decode("latin-1")
    if "token=" in query:
        values = parse_qs(query).get("token")
        if values and values[0]:
            return values[0]
    for name, value in scope["headers"]:
        if name == b"cookie":
            cookie: SimpleCookie = SimpleCookie()
            try:
                cookie.load(value.decode("latin-1"))
            except Exception:
                return None
            morsel = cookie.get(PAGE_TOKEN_COOKIE)
            return morsel.value if morsel is not None and morsel.value else None
    return None


class _Bucket:
    __slots__ = ("tokens", "at")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at


class RateLimiter:
    """A token bucket per client key (in this process: N replicas allow N times the rate).

    At most ``max_keys`` buckets are kept: a new key evicts the least recently seen one, so
    a flood of new keys (addresses) forgets idle clients, never one that keeps asking.
    """

    def __init__(self, max_keys: int = 50_000) -> None:
        self._buckets: LRU[str, _Bucket] = LRU(max_keys)
        self._lock = threading.Lock()

    def wait(self, key: str, rate: float, burst: int) -> float:
        """0 when the request may go now (and is counted), else seconds until it may."""
        if rate <= 0:
            return 0.0
        now = time.monotonic()
        with self._lock:
            bucket = self._buckets.setdefault(key, lambda: _Bucket(float(burst), now))
            bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.at) * rate)
            bucket.at = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0.0
            return (1.0 - bucket.tokens) / rate

    def refund(self, key: str, burst: int) -> None:
        """Give back a request :meth:`wait` counted (it turned out not to be one to count)."""
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is not None:
                bucket.tokens = min(float(burst), bucket.tokens + 1.0)


async def _send_error(
    send: Send,
    status: int,
    code: str,
    message: str,
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
    close: bool = False,
) -> None:
    body = json.dumps(error_body(code, message)).encode()
    head = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *(headers or []),
    ]
    if close:
        head.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """Authentication from the headers, then the rate limit, then a bounded body read."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.limiter = RateLimiter()

    async def _anonymous_allowed(self, send: Send, address_key: str, settings: Any) -> bool:
        """Count a request without a (known) token against its address; False (and a 429
        sent) when the address is over the rate."""
        wait = self.limiter.wait(
            address_key, settings.rate_limit_per_second, settings.rate_limit_burst
        )
        if wait > 0:
            await _send_rate_limited(send, wait, settings)
            return False
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        service = getattr(scope["app"].state, "service", None)
        if service is None:  # not started (no lifespan): nothing to check against
            await self.app(scope, receive, send)
            return
        settings = service.settings
        method = scope["method"]
        path = scope["path"]
        token = bearer(scope["headers"])
        if token is None and method in ("GET", "HEAD"):
            # a page a browser opens (the dashboard) carries its token in ?token= or a cookie
            token = scope_page_token(scope)
        client = scope.get("client")
        address = client[0] if client else "?"
        # 1. who is asking, from the headers alone
        admitted, client_key = await self._authenticate(send, service, method, path, token, address)
        # 2. how often
        if not admitted or not await self._within_rate(
            send, settings, method, path, client_key or "addr:" + address, address
        ):
            return
        # 3. the body, bounded in size and time
        if method not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive, send, settings, scope["headers"])
        if body is None:
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _authenticate(
        self, send: Send, service: Any, method: str, path: str, token: str | None, address: str
    ) -> tuple[bool, str | None]:
        """(admitted, the key the request is rate-limited by: None for its address). A
        request without a valid token is counted against its address before it is answered
        (401 or 429), so guessing tokens costs the guesser the same rate as any anonymous
        request; a refused one is answered here."""
        settings = service.settings
        address_key = "addr:" + address
        if method == "POST" and path.rstrip("/") == "/projects":
            if not admin_token_ok(settings.admin_token, token):
                if await self._anonymous_allowed(send, address_key, settings):
                    await _send_error(
                        send, 401, "unauthorized", "creating a project needs the admin token"
                    )
                return False, None
            return True, "admin" if settings.admin_token else None
        match = _PROJECT_PATH.match(path)
        if match is None:
            return True, None
        project_id = unquote(match.group(1)) if "%" in match.group(1) else match.group(1)
        if token is None:
            if await self._anonymous_allowed(send, address_key, settings):
                await _send_error(
                    send,
                    401,
                    "unauthorized",
                    "missing bearer token (Authorization: Bearer <token>)",
                )
            return False, None
        if (
            settings.admin_token
            and _GOLD_PATH.match(path) is not None
            and admin_token_ok(settings.admin_token, token)
        ):
            # the gold routes answer the admin token (their answers are the checks')
            return True, "admin"
        return await self._project_token(send, service, token, project_id, address_key)

    async def _project_token(
        self, send: Send, service: Any, token: str, project_id: str, address_key: str
    ) -> tuple[bool, str | None]:
        """(admitted, rate key) of a request with a token on a project's path: the token must
        be the project's (401 unknown, 403 another project's, 503 no store to ask)."""
        settings = service.settings
        owner = service.tokens.cached(service.store, token)
        if owner is None:
            # a token this replica has not checked lately costs a store lookup: it
            # spends the address's budget first (an unknown token keeps it spent)
            if not await self._anonymous_allowed(send, address_key, settings):
                return False, None
            try:
                owner = await anyio.to_thread.run_sync(
                    service.tokens.get, service.store, token, settings.token_cache_seconds
                )
            except Exception:
                await _send_error(
                    send,
                    503,
                    "unavailable",
                    "the store is not reachable",
                    headers=[(b"retry-after", str(RETRY_AFTER_SECONDS).encode())],
                )
                return False, None
            if owner is not None:
                self.limiter.refund(address_key, settings.rate_limit_burst)
        if owner is None:
            await _send_error(send, 401, "unauthorized", "invalid bearer token")
            return False, None
        if owner != project_id:
            await _send_error(
                send, 403, "forbidden", "this token does not give access to that project"
            )
            return False, None
        return True, "token:" + repo.hash_token(token)

    async def _within_rate(
        self, send: Send, settings: Any, method: str, path: str, key: str, address: str
    ) -> bool:
        """Count the request against ``key``'s bucket (and a project creation against its
        address's); False (and a 429 sent) when over the rate."""
        wait = self.limiter.wait(key, settings.rate_limit_per_second, settings.rate_limit_burst)
        per_minute = settings.create_project_per_minute
        if not wait and per_minute and method == "POST" and path.rstrip("/") == "/projects":
            # each creation stores a project and a token: a flood is cheap to send, not to keep
            wait = self.limiter.wait("create:" + address, per_minute / 60.0, 10)
        if wait > 0:
            await _send_rate_limited(send, wait, settings)
            return False
        return True


async def _read_body(
    receive: Receive, send: Send, settings: Any, headers: list[tuple[bytes, bytes]]
) -> bytes | None:
    """The whole body, or None when it was refused (413 too large, 408 too slow; the
    connection closed) or the client went away."""
    limit = settings.max_body_bytes
    declared = _content_length(headers)
    if declared is not None and declared > limit:
        await _send_error(
            send,
            413,
            "payload_too_large",
            f"the body has {declared} bytes; the limit is {limit}",
            close=True,
        )
        return None
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + settings.body_timeout_seconds
    while True:
        remaining = deadline - time.monotonic()
        message: Message | None = None
        if remaining > 0:
            with anyio.move_on_after(remaining):
                message = await receive()
        if message is None:
            await _send_error(
                send,
                408,
                "request_timeout",
                f"the body did not arrive within {settings.body_timeout_seconds:g} s",
                close=True,
            )
            return None
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            await _send_error(
                send,
                413,
                "payload_too_large",
                f"the body has more than {limit} bytes (the limit)",
                close=True,
            )
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send_rate_limited(send: Send, wait: float, settings: Any) -> None:
    retry = max(1, math.ceil(wait))
    await _send_error(
        send,
        429,
        "rate_limited",
        f"more than {settings.rate_limit_per_second:g} requests per second "
        f"(bursts of {settings.rate_limit_burst}); retry after {retry} s",
        headers=[(b"retry-after", str(retry).encode())],
    )


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def describe(settings: Any) -> str:
    """One line of the limits in force (for the start-up message)."""
    rate = (
        f"{settings.rate_limit_per_second:g}/s per token (burst {settings.rate_limit_burst})"
        if settings.rate_limit_per_second > 0
        else "no rate limit"
    )
    return (
        f"body <= {settings.max_body_bytes} bytes within {settings.body_timeout_seconds:g} s; "
        f"{rate}; revoked tokens stop within {settings.token_cache_seconds:g} s"
    )
