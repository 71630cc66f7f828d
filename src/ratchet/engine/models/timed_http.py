"""An httpx client whose requests have a total deadline, not only a timeout per read.

httpx bounds each connect, read and write separately, so a server that sends one byte every
half second keeps a request alive for ever. Here every read and write of a request's
connection is bounded by what is left of the deadline set with :func:`deadline` in the calling
thread (the sync client does a request's I/O in the thread that makes it), and a request
whose deadline has passed fails with a timeout.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from urllib.parse import urlsplit

import httpcore
import httpx

__all__ = ["client", "deadline"]

_local = threading.local()


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Bound the requests this thread makes inside the block to ``seconds`` in all."""
    _local.at = time.monotonic() + seconds
    try:
        yield
    finally:
        _local.at = None


def client(base_url: str, timeout_s: float, max_connections: int) -> httpx.Client:
    """Return a client for ``base_url`` whose requests honour :func:`deadline`.

    Through a proxy from the environment (``HTTPS_PROXY`` and friends) httpx builds its own
    connection pool, so there each read is bounded by ``timeout_s`` but the whole request is not.
    """
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    timeout = httpx.Timeout(timeout_s)
    if _proxied(base_url):
        return httpx.Client(timeout=timeout, limits=limits)
    return httpx.Client(timeout=timeout, transport=_DeadlineTransport(limits))


def _proxied(url: str) -> bool:
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    wanted = parts.scheme in proxies or "all" in proxies
    return wanted and not urllib.request.proxy_bypass(parts.hostname or "")


def _bounded(timeout: float | None) -> float | None:
    """The smaller of ``timeout`` and the time left before this thread's deadline."""
    at: float | None = getattr(_local, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _bounded(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _bounded(timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        tls = self._stream.start_tls(ssl_context, server_hostname, _bounded(timeout))
        return _DeadlineStream(tls)

    def get_extra_info(self, info: str) -> object:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._backend.connect_tcp(
            host, port, _bounded(timeout), local_address, socket_options
        )
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._backend.connect_unix_socket(path, _bounded(timeout), socket_options)
        return _DeadlineStream(stream)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport over a connection pool that uses the deadline-aware backend."""

    def __init__(self, limits: httpx.Limits) -> None:
        super().__init__(limits=limits)
        # httpx takes no network backend, so the pool it built is replaced by an equal one
        # that has ours (httpx's handle_request only uses the pool).
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_DeadlineBackend(),
        )
