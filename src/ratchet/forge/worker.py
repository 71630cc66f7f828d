"""The sandboxed side of a model-written env: loads ``module.py`` and answers requests.

:mod:`ratchet.forge.written` copies this file and the module into a sandbox's workspace and
runs ``python -I -S -B worker.py`` there. It imports only the standard library: the sandbox
cannot read ratchet or any installed package. One JSON request per line comes on stdin and one
JSON reply per line goes to stdout, ``{"ok": value}`` or ``{"error": text}``; an exception in
the module is an error reply, never the end of the worker. Whatever the module prints goes to
stderr, so it cannot break the protocol.

Requests (``op``): ``info``; ``sample`` (``seeds``, ``difficulty``: one task or error per seed);
``oracle`` (``params``); ``open`` (``session``, ``params``); ``call`` (``session``, ``name``,
``arguments``); ``verify`` (``session``, ``answer``); ``close`` (``session``).
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
import traceback
from typing import Any

MODULE_FILE = "module.py"
ERROR_CHARS = 2000


def main() -> None:
    """Serve requests until stdin closes."""
    replies = sys.stdout
    sys.stdout = sys.stderr
    module: Any = None
    failure = ""
    try:
        spec = importlib.util.spec_from_file_location("forged_module", MODULE_FILE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except BaseException as exc:  # the module's own fault, reported on every request
        failure = "the module failed to import:\n" + _trace(exc)
    worlds: dict[str, tuple[Any, Any]] = {}
    for line in sys.stdin:
        request: dict[str, Any] = {}
        try:
            if failure:
                raise ImportError(failure)
            request = json.loads(line)
            reply = {"ok": _handle(module, worlds, request)}
        except BaseException as exc:  # every failure is a reply; the worker goes on
            reply = {"error": failure or _explain(request, exc)}
        replies.write(json.dumps(reply, default=str) + "\n")
        replies.flush()


def _handle(module: Any, worlds: dict[str, tuple[Any, Any]], request: dict[str, Any]) -> Any:
    op = request.get("op")
    if op == "info":
        return {
            "name": getattr(module, "NAME", None),
            "description": getattr(module, "DESCRIPTION", None),
            "max_difficulty": getattr(module, "MAX_DIFFICULTY", None),
            "tools": getattr(module, "TOOLS", None),
        }
    if op == "sample":
        return [_sample(module, seed, request["difficulty"]) for seed in request["seeds"]]
    if op == "oracle":
        return module.oracle(request["params"])
    if op == "open":
        worlds[request["session"]] = (request["params"], module.build(request["params"]))
        return None
    if op == "close":
        worlds.pop(request["session"], None)
        return None
    if request.get("session") not in worlds:
        raise KeyError(f"no open session {request.get('session')!r}")
    params, world = worlds[request["session"]]
    if op == "call":
        result = module.call(world, request["name"], request["arguments"])
        return result if isinstance(result, str) else json.dumps(result, default=str)
    if op == "verify":
        return module.verify(params, world, request["answer"])
    raise ValueError(f"unknown request {op!r}")


def _sample(module: Any, seed: int, difficulty: int) -> Any:
    try:
        return module.sample(random.Random(seed), difficulty)
    except Exception as exc:
        return {"error": _trace(exc)}


def _explain(request: dict[str, Any], exc: BaseException) -> str:
    """A tool's failure is for the agent to read (its message); any other, a traceback."""
    if request.get("op") == "call":
        return str(exc) or type(exc).__name__
    return _trace(exc)


def _trace(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc, limit=-4))
    return text[-ERROR_CHARS:]


if __name__ == "__main__":
    main()
