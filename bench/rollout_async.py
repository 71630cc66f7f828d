"""Asynchronous rollouts against lockstep turns, on a fake server whose latency varies 10x.

A local HTTP server speaks the OpenAI chat completions API and answers every request with the
oracle's next call for the calc task in the conversation, after a latency drawn log-uniformly
between 20 and 200 ms. The same episodes are played twice through the ``openai`` backend:

- lockstep (the baseline, implemented here): each turn sends the next request of every live
  episode at once and waits for all the replies before any episode takes its next step, so
  every turn waits for the slowest request;
- async (``ratchet.engine.rollout.rollout``): each episode advances as soon as its own reply
  arrives.

Prints episodes/s of each and their ratio (async / lockstep), measured in one run.

    .venv/bin/python bench/rollout_async.py [--episodes 32] [--difficulty 3]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ratchet.core.agent import Agent
from ratchet.core.task import Task
from ratchet.engine.harness import act, system_message
from ratchet.engine.models.base import Prompt, Sampling
from ratchet.engine.models.openai import OpenAIModel
from ratchet.engine.rollout import RolloutConfig, rollout
from ratchet.envs.calc import env

LATENCY_S = (0.02, 0.2)


def fake_server(tasks: list[Task], seed: int) -> ThreadingHTTPServer:
    """Start the fake server on a free loopback port (a daemon thread serves it)."""
    by_text = {t.instruction: t for t in tasks}
    rng, lock = random.Random(seed), threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            messages = body["messages"]
            task = next(by_text[m["content"]] for m in messages if m.get("content") in by_text)
            step = sum(1 for m in messages if m["role"] == "tool")
            call = env.oracle(task)[step]
            with lock:
                delay = math.exp(rng.uniform(*map(math.log, LATENCY_S)))
            time.sleep(delay)
            arguments = json.dumps(call.arguments)
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{step}",
                        "type": "function",
                        "function": {"name": call.name, "arguments": arguments},
                    }
                ],
            }
            reply = json.dumps(
                {
                    "choices": [{"message": message, "finish_reason": "tool_calls"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 10},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def lockstep(tasks: list[Task], agent: Agent, model: OpenAIModel) -> int:
    """Play the tasks turn by turn: every turn waits for the slowest reply. Returns passes."""
    sessions = [env.session(task) for task in tasks]
    firsts = [session.reset() for session in sessions]
    messages = [[system_message(agent), {"role": "user", "content": f.text}] for f in firsts]
    live = list(range(len(tasks)))
    for turn in range(agent.max_turns):
        prompts = [Prompt(tuple(messages[i]), firsts[i].tools) for i in live]
        replies = model.complete(prompts, Sampling(0.0, 48, turn))
        still = []
        for i, completion in zip(live, replies, strict=True):
            step, said = act(sessions[i], completion, turn)
            messages[i].extend(said)
            if not step.observation.done:
                still.append(i)
        live = still
        if not live:
            break
    passed = sum(session.verify().passed for session in sessions)
    for session in sessions:
        session.close()
    return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--difficulty", type=int, default=3)
    args = parser.parse_args()
    tasks = env.tasks("test", args.episodes, seed=0, difficulty=args.difficulty)
    server = fake_server(tasks, seed=0)
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    model = OpenAIModel("bench", base_url=url, max_concurrency=args.episodes)
    agent = Agent(model="openai:bench", max_turns=args.difficulty + 2, temperature=0.0)

    started = time.perf_counter()
    passed = lockstep(tasks, agent, model)
    lockstep_rate = len(tasks) / (time.perf_counter() - started)
    assert passed == len(tasks), f"lockstep solved {passed} of {len(tasks)}"

    config = RolloutConfig(concurrency=args.episodes, max_reply_tokens=48)
    started = time.perf_counter()
    played = rollout(env, tasks, agent, model, config)
    async_rate = len(tasks) / (time.perf_counter() - started)
    assert all(t.passed for t in played), "async rollouts failed some episodes"
    server.shutdown()

    print(f"{len(tasks)} episodes of {args.difficulty + 1} turns, latency 20-200 ms per request")
    print(f"lockstep: {lockstep_rate:.2f} episodes/s")
    print(f"async:    {async_rate:.2f} episodes/s")
    print(f"async / lockstep: {async_rate / lockstep_rate:.2f}x")


if __name__ == "__main__":
    main()
