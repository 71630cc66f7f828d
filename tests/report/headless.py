"""A tiny Chrome DevTools Protocol client over --remote-debugging-pipe (stdlib only).

Chromium reads protocol messages from fd 3 and writes them to fd 4, each a JSON object ended by
a NUL byte. That is all a test needs to load a page, collect console errors, uncaught
exceptions and network requests, read values from the DOM and take a full-page screenshot,
without websockets or a browser-automation package.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    """Return the path of a Chromium executable on PATH, or ``None``."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageResult:
    """What loading a page produced."""

    value: Any = None
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    screenshot: bytes = b""


class Chromium:
    """A headless Chromium driven over its debugging pipe; use as a context manager."""

    def __init__(self, executable: str, profile: Path, width: int = 1280, height: int = 2000):
        self.width, self.height = width, height
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()

        def wire_pipes() -> None:  # runs in the child before exec
            # Move both ends above fd 4 first so neither dup2 can clobber the other.
            high_in = fcntl.fcntl(commands_read, fcntl.F_DUPFD, 10)
            high_out = fcntl.fcntl(replies_write, fcntl.F_DUPFD, 10)
            os.dup2(high_in, 3)
            os.dup2(high_out, 4)

        self._process = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--no-default-browser-check",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,  # fds 3 and 4 must survive exec; Python's own fds are not inheritable
            preexec_fn=wire_pipes,  # the tests start it before any thread
        )
        os.close(commands_read)
        os.close(replies_write)
        self._inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._events: list[dict[str, Any]] = []
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Ask the browser to quit, then make sure it did."""
        with contextlib.suppress(OSError, TimeoutError, RuntimeError):
            self.call("Browser.close", timeout_s=5)
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for fd in (self._commands, self._replies):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._replies, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                self._inbox.put(None)
                return
            buffer += chunk
            while b"\0" in buffer:
                message, buffer = buffer.split(b"\0", 1)
                self._inbox.put(json.loads(message))

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout_s: float = 30,
    ) -> dict[str, Any]:
        """Send one command and return its result; events seen meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._next(deadline, method)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method} failed: {reply['error']}")
                return dict(reply.get("result", {}))
            self._events.append(reply)

    def wait_for(self, event: str, timeout_s: float = 30) -> dict[str, Any]:
        """Wait for an event (or return one already received)."""
        for seen in self._events:
            if seen.get("method") == event:
                return seen
        deadline = time.monotonic() + timeout_s
        while True:
            message = self._next(deadline, event)
            self._events.append(message)
            if message.get("method") == event:
                return message

    def _next(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no answer from Chromium while waiting for {waiting_for}")
        try:
            message = self._inbox.get(timeout=remaining)
        except queue.Empty:
            raise TimeoutError(f"no answer from Chromium while waiting for {waiting_for}") from None
        if message is None:
            raise RuntimeError("Chromium closed its debugging pipe")
        return message

    def load(self, url: str, expression: str = "null", timeout_s: float = 30) -> PageResult:
        """Open ``url``, wait for it to load, evaluate ``expression``, screenshot the page."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable", session=session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        self._events.clear()
        self.call("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", timeout_s)
        evaluated = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session
        )
        size = self.call("Page.getLayoutMetrics", session=session)["cssContentSize"]
        shot = self.call(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                         "scale": 1},
            },
            session=session,
        )  # fmt: skip
        return PageResult(
            value=evaluated.get("result", {}).get("value"),
            console_errors=_errors(self._events),
            requests=[
                e["params"]["request"]["url"]
                for e in self._events
                if e.get("method") == "Network.requestWillBeSent"
            ],
            screenshot=base64.b64decode(shot["data"]),
        )


def _errors(events: list[dict[str, Any]]) -> list[str]:
    """Console errors, failed assertions, uncaught exceptions and error log entries."""
    found = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            found.append(
                " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            )
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            found.append(str(details.get("exception", {}).get("description", details.get("text"))))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            found.append(f"{entry.get('text')} {entry.get('url', '')}".strip())
    return found
