"""``GET /metrics``: the server's counters in Prometheus' text format.

One registry per server (never the process-wide default one). What it counts:

- ``ratchet_serve_requests_total{route, status}``: every request answered, refused ones at the
  door included;
- ``ratchet_serve_request_seconds{route}``: how long each took, as a histogram;
- ``ratchet_serve_prompt_tokens_total{model}`` and ``ratchet_serve_completion_tokens_total{model}``:
  tokens read and generated;
- ``ratchet_serve_queue_depth``: chat requests waiting for or in generation right now.

Routes are labelled by their pattern (``/v1/models/{model}``), and any path that is no route
as ``other``, so clients cannot grow the label set.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ratchet.serve.guard import App, Message, Receive, Scope, Send

CONTENT_TYPE = CONTENT_TYPE_LATEST
ROUTES = (
    "/health",
    "/metrics",
    "/v1/models",
    "/v1/chat/completions",
    "/v1/feedback",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
)
MODEL_ROUTE = "/v1/models/{model}"


class Metrics:
    """The server's counters, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "ratchet_serve_requests",
            "Requests answered, by route and HTTP status.",
            ["route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "ratchet_serve_request_seconds",
            "Seconds from a request's arrival to its last byte, by route.",
            ["route"],
            registry=self.registry,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
        )
        self.prompt_tokens = Counter(
            "ratchet_serve_prompt_tokens",
            "Prompt tokens read, by model.",
            ["model"],
            registry=self.registry,
        )
        self.completion_tokens = Counter(
            "ratchet_serve_completion_tokens",
            "Tokens generated, by model.",
            ["model"],
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "ratchet_serve_queue_depth",
            "Chat requests waiting for or in generation.",
            registry=self.registry,
        )

    def tokens(self, model: str, prompt: int, completion: int) -> None:
        """Count a reply's tokens."""
        self.prompt_tokens.labels(model).inc(prompt)
        self.completion_tokens.labels(model).inc(completion)

    def text(self) -> bytes:
        """Everything, in Prometheus' text format."""
        return bytes(generate_latest(self.registry))


def route_of(path: str) -> str:
    """The route pattern a path is labelled by."""
    if path in ROUTES:
        return path
    if path.startswith("/v1/models/"):
        return MODEL_ROUTE
    return "other"


class Counted:
    """ASGI middleware that counts every request and times it (outermost, so refusals count).

    Args:
        app: The app behind it.
        metrics: Where to count.
    """

    def __init__(self, app: App, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; count it once its response has started."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server would answer if the app raised before answering

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        route = route_of(scope["path"])
        try:
            await self.app(scope, receive, counted)
        finally:
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)
