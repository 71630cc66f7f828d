"""The ``openai`` backend: any OpenAI-compatible chat completions server.

Works with vLLM, SGLang, llama.cpp's server, Ollama and hosted APIs. Each prompt is one
``POST {base_url}/chat/completions``; a batch runs concurrently on a thread pool, and one
semaphore per model bounds the requests in flight across all concurrent ``complete`` calls.

Tools are offered natively (``tools`` with ``tool_choice: "required"``). Servers that reject
``required`` are asked with ``"auto"``; servers that reject tools altogether get the tool
schemas and the expected JSON format in the system message instead, and the reply text is
left for the harness to parse. Each downgrade is remembered for the model's lifetime.

``timeout_s`` bounds each request as a whole (connect, send, and every byte of the reply), so a
server that trickles its reply cannot stall a run; a reply body over 64 MiB is refused, and
reply text (with tool-call arguments) over 100,000 characters is cut to that before it is
stored. A malformed reply, ``tool_calls`` field or token count becomes that completion's error
or a malformed action, never an exception.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import random
import re
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import httpx

import ratchet.engine.models.timed_http as timed_http
from ratchet.core.tool import ToolCall
from ratchet.engine.models.base import (
    Completion,
    ModelError,
    Prompt,
    Sampling,
    estimate_tokens,
    offered_tools,
    row_seeds,
)
from ratchet.engine.models.openai_messages import parse_tool_calls, text_messages

ToolMode = Literal["required", "auto", "text"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
MAX_REPLY_CHARS = 100_000
MAX_RESPONSE_BYTES = 64 << 20
_MAX_TOKENS = 2**31
_ERROR_TEXT_CHARS = 500
_TOOL_CHOICE = re.compile(r"tool[_ ]choice", re.IGNORECASE)
# Servers word "no tools here" differently: Ollama "does not support tools", llama.cpp "tools
# param requires --jinja flag", vLLM "tool choice requires --enable-auto-tool-choice".
_TOOLS_UNSUPPORTED = re.compile(
    r"tool.*(support|enabl|requir|jinja|allow)|(support|enabl|allow).*tool",
    re.IGNORECASE | re.DOTALL,
)


class OpenAIModel:
    """A model served behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Attributes:
        name: The model reference recorded on trajectories, ``openai:MODEL``.
        model: The model id sent to the server (e.g. ``Qwen/Qwen2.5-7B-Instruct``).
        base_url: The API root, ending before ``/chat/completions`` (usually in ``/v1``).
        tool_mode: How tools are offered now: ``required`` or ``auto`` (native ``tools``) or
            ``text`` (schemas in the system message, JSON tool call in the reply text).
    """

    def __init__(
        self,
        name: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 8,
        timeout_s: float = 60,
        max_retries: int = 5,
        backoff_base_s: float = 0.5,
        max_backoff_s: float = 30.0,
        native_tools: bool = True,
        extra_body: Mapping[str, Any] | None = None,
        context_window: int | None = 131_072,
    ) -> None:
        """Configure the backend; no request is made until :meth:`complete`.

        Args:
            name: The model id on the server.
            base_url: The API root, e.g. ``http://localhost:8000/v1``. Defaults to the
                ``OPENAI_BASE_URL`` environment variable, else the OpenAI API.
            api_key_env: Environment variable holding the API key. If it is unset, no
                ``Authorization`` header is sent (fine for local servers).
            max_concurrency: Most requests in flight at once, across all callers.
            timeout_s: Seconds one request may take in all (connecting, sending, receiving
                the whole reply) before it is abandoned and retried.
            max_retries: Retries after the first attempt on 429, 5xx, timeouts and connection
                errors; other 4xx responses are not retried.
            backoff_base_s: First retry delay; it doubles on each retry, with jitter.
            max_backoff_s: Cap on one retry delay, ``Retry-After`` included.
            native_tools: Offer tools with the ``tools`` field; ``False`` puts them in the
                system message and expects a JSON tool call in the reply text.
            extra_body: Extra fields merged into every request body (e.g.
                ``{"top_p": 0.9}`` or server-specific options).
            context_window: The served model's context window in tokens (``None``: unknown);
                prompts are kept inside it with the context policy, their size estimated by
                :func:`.base.estimate_tokens`.

        Raises:
            ValueError: If a limit is out of range or the model name is empty.
        """
        if not name:
            raise ValueError("the openai backend needs a model name: --model openai:NAME")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, got {max_retries}")
        if backoff_base_s < 0 or max_backoff_s < 0:
            raise ValueError("backoff_base_s and max_backoff_s must be 0 or more")
        self.name = f"openai:{name}"
        self.model = name
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip(
            "/"
        )
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.max_backoff_s = max_backoff_s
        self.extra_body = dict(extra_body or {})
        self.tool_mode: ToolMode = "required" if native_tools else "text"
        self.context_window = context_window
        self._url = f"{self.base_url}/chat/completions"
        self._api_key = os.environ.get(api_key_env) or None
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._mode_lock = threading.Lock()
        self._reached = False
        self._unreachable: str | None = None
        self._client = timed_http.client(self.base_url, timeout_s, max_concurrency)

    def count_tokens(self, prompt: Prompt) -> int:
        """Return an over-estimate of the prompt's tokens (the server's tokenizer is unknown)."""
        return estimate_tokens(prompt)

    def complete(self, prompts: Sequence[Prompt], sampling: Sampling) -> list[Completion]:
        """Send one chat completion request per prompt, concurrently, and return them in order.

        A prompt with its own seed is sent that seed; otherwise, with ``sampling.seed`` set,
        prompt ``i`` of the batch is sent ``seed + i``, so repeated samples of one conversation
        differ yet reproduce.

        Raises:
            ModelError: If the server could not be connected to on any attempt and has never
                answered this model before.
        """
        if not prompts:
            return []
        seeds = row_seeds(prompts, sampling)
        if len(prompts) == 1:
            return [self._complete_one(prompts[0], sampling, seeds[0])]
        pool = ThreadPoolExecutor(min(len(prompts), self.max_concurrency), "ratchet-openai")
        try:
            futures = [
                pool.submit(self._complete_one, prompt, sampling, seed)
                for prompt, seed in zip(prompts, seeds, strict=True)
            ]
            return [future.result() for future in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        """Close the HTTP connections; the model cannot complete afterwards."""
        self._client.close()

    def _complete_one(self, prompt: Prompt, sampling: Sampling, seed: int | None) -> Completion:
        start = time.perf_counter()
        attempts = 0
        waited_s = 0.0
        never_connected = True
        while True:
            if self._unreachable is not None:
                raise ModelError(self._unreachable)
            mode: ToolMode | None = self.tool_mode if prompt.tools else None
            retry_after_s: float | None = None
            attempts += 1
            try:
                with self._slots, timed_http.deadline(self.timeout_s):
                    response = self._post(self._body(prompt, sampling, seed, mode))
            except _TooLarge as exc:
                return self._failed(str(exc), start, attempts, waited_s)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                failure = f"cannot connect to {self._url}: {exc}"
            except httpx.TimeoutException:
                never_connected = False
                failure = f"no reply from {self._url} within {self.timeout_s:g} s"
            except httpx.TransportError as exc:
                never_connected = False
                failure = f"connection to {self._url} failed: {type(exc).__name__}: {exc}"
            else:
                never_connected = False
                self._reached = True
                status = response.status_code
                if status == 200:
                    return self._parse(response, mode, start, attempts, waited_s)
                message = _error_message(response)
                if mode is not None and status in (400, 422) and self._downgrade(mode, message):
                    attempts -= 1
                    continue
                if status != 429 and status < 500:
                    return self._failed(
                        f"HTTP {status} from {self._url}: {message}{self._hint(status)}",
                        start,
                        attempts,
                        waited_s,
                    )
                failure = f"HTTP {status} from {self._url}: {message}"
                retry_after_s = _retry_after_s(response.headers.get("retry-after"))
            if attempts > self.max_retries:
                if never_connected and not self._reached:
                    self._unreachable = (
                        f"cannot reach the model server at {self.base_url} "
                        f"({attempts} attempts; last: {failure}). Is the server running? "
                        "Point to it with --base-url URL (e.g. http://localhost:8000/v1)."
                    )
                    raise ModelError(self._unreachable)
                return self._failed(
                    f"gave up after {attempts} attempts: {failure}", start, attempts, waited_s
                )
            delay_s = self._delay_s(attempts, retry_after_s)
            time.sleep(delay_s)
            waited_s += delay_s

    def _post(self, body: dict[str, Any]) -> httpx.Response:
        """POST ``body`` and read the reply, refusing bodies over the size cap."""
        with self._client.stream("POST", self._url, json=body, headers=self._headers()) as reply:
            received = bytearray()
            for chunk in reply.iter_bytes():
                received += chunk
                if len(received) > MAX_RESPONSE_BYTES:
                    raise _TooLarge(
                        f"the reply from {self._url} is over {MAX_RESPONSE_BYTES >> 20} MiB"
                    )
        # The bytes are decoded already; a kept Content-Encoding would decode them twice.
        headers = reply.headers.copy()
        headers.pop("content-encoding", None)
        return httpx.Response(reply.status_code, headers=headers, content=bytes(received))

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _body(
        self, prompt: Prompt, sampling: Sampling, seed: int | None, mode: ToolMode | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "temperature": sampling.temperature
            if prompt.temperature is None
            else prompt.temperature,
            "max_tokens": sampling.max_tokens,
        }
        if seed is not None:
            body["seed"] = seed
        if mode == "text":
            body["messages"] = text_messages(prompt.messages, offered_tools(prompt))
        else:
            body["messages"] = list(prompt.messages)
            if mode is not None:
                body["tools"] = list(offered_tools(prompt))
                body["tool_choice"] = mode
        body.update(self.extra_body)
        return body

    def _downgrade(self, mode: ToolMode, message: str) -> bool:
        """Step down from a tool mode the server rejected; ``False`` if the error is another."""
        if mode == "required" and _TOOL_CHOICE.search(message):
            fallback: ToolMode = "auto"
        elif mode != "text" and _TOOLS_UNSUPPORTED.search(message):
            fallback = "text"
        else:
            return False
        with self._mode_lock:
            # Another request may have stepped down already, possibly further.
            if self.tool_mode == mode:
                self.tool_mode = fallback
        return True

    def _delay_s(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, self.max_backoff_s)
        ceiling_s = min(self.backoff_base_s * 2 ** (attempt - 1), self.max_backoff_s)
        # Jitter spreads out the retries of a batch that failed together.
        return random.uniform(ceiling_s / 2, ceiling_s)

    def _hint(self, status: int) -> str:
        if status == 401 and self._api_key is None:
            return f" (no API key: set the {self.api_key_env} environment variable)"
        if status in (401, 403):
            return f" (check the API key in {self.api_key_env})"
        if status == 404:
            return f" (check --base-url, usually ending in /v1, and the model name {self.model!r})"
        return ""

    def _parse(
        self,
        response: httpx.Response,
        mode: ToolMode | None,
        start: float,
        attempts: int,
        waited_s: float,
    ) -> Completion:
        try:
            data = response.json()
            choice = data["choices"][0]
            message = choice["message"]
            content = message.get("content") or ""
            usage = data.get("usage") or {}
            prompt_tokens = _token_count(usage.get("prompt_tokens"), "prompt_tokens")
            completion_tokens = _token_count(usage.get("completion_tokens"), "completion_tokens")
            finish_reason = choice.get("finish_reason")
            text = content if isinstance(content, str) else json.dumps(content)
            calls, raw_text = parse_tool_calls(message.get("tool_calls") or [])
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            return self._failed(
                f"malformed response from {self._url} ({type(exc).__name__}: {exc}): "
                f"{response.text[:_ERROR_TEXT_CHARS]}",
                start,
                attempts,
                waited_s,
            )
        if raw_text:
            text = f"{text}\n{raw_text}" if text else raw_text
        text, calls, truncated = _capped(text, calls)
        return Completion(
            text,
            tool_calls=calls,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_s=time.perf_counter() - start,
            metadata={
                "finish_reason": finish_reason if isinstance(finish_reason, str) else None,
                "tool_mode": mode,
                "attempts": attempts,
                "retry_wait_s": waited_s,
                **({"truncated": True} if truncated else {}),
            },
        )

    def _failed(self, error: str, start: float, attempts: int, waited_s: float) -> Completion:
        return Completion(
            "",
            latency_s=time.perf_counter() - start,
            error=error,
            metadata={"attempts": attempts, "retry_wait_s": waited_s},
        )


def _error_message(response: httpx.Response) -> str:
    """Pull the server's error message out of the common error body shapes."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:_ERROR_TEXT_CHARS].strip() or response.reason_phrase
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            value = data.get(key)
            if isinstance(value, dict) and value.get("message"):
                return str(value["message"])[:_ERROR_TEXT_CHARS]
            if value:
                return (value if isinstance(value, str) else json.dumps(value))[:_ERROR_TEXT_CHARS]
    return json.dumps(data)[:_ERROR_TEXT_CHARS]


def _retry_after_s(value: str | None) -> float | None:
    """Read a ``Retry-After`` header: seconds, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _TooLarge(Exception):
    """A reply body over :data:`MAX_RESPONSE_BYTES`."""


def _token_count(value: Any, name: str) -> int:
    """Read a usage count; ``None`` is 0, anything but a plausible count is malformed."""
    if value is None:
        return 0
    plausible = isinstance(value, int | float) and not isinstance(value, bool)
    if not plausible or not math.isfinite(value) or value != int(value):
        raise ValueError(f"usage.{name} is not a token count: {json.dumps(value)[:40]}")
    if not 0 <= value < _MAX_TOKENS:
        raise ValueError(f"usage.{name} is out of range: {value:g}")
    return int(value)


def _capped(text: str, calls: tuple[ToolCall, ...]) -> tuple[str, tuple[ToolCall, ...], bool]:
    """Cut a reply over :data:`MAX_REPLY_CHARS` (text plus tool-call arguments) to the cap.

    Tool calls of a cut reply are shown as text, so the harness reports a malformed action.
    """
    shown = [json.dumps({"name": c.name, "arguments": c.arguments}) for c in calls]
    if len(text) + sum(map(len, shown)) <= MAX_REPLY_CHARS:
        return text, calls, False
    whole = "\n".join(part for part in [text, *shown] if part)
    cut = f"{whole[:MAX_REPLY_CHARS]}\n[reply truncated at {MAX_REPLY_CHARS} characters]"
    return cut, (), True
