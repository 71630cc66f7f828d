"""An agent written with the plain ``openai`` client, improved by Ratchet from its own traffic.

The agent answers arithmetic questions with four tools that it runs itself, and knows each
right answer, so it reports a verdict per question to ``POST /v1/feedback``. Like many
applications it opens each conversation with a few worked demonstrations: turns it wrote
itself, which the server records as given context, never as the agent's own. Pointed at
``ratchet serve``, its conversations are recorded token for token; ``ratchet improve
--experience`` learns from the judged ones (only from the turns the model generated), and the
improved agent, which no longer needs the demonstrations, is served back under the same API.
With the embedded model, offline and without a key:

    ratchet serve base --env calc --store runs/traffic --port 8000 &
    python examples/traffic_agent.py --base-url http://127.0.0.1:8000/v1 -n 48
    ratchet improve calc --experience runs/traffic --levers rft --rounds 1 --out runs/from-traffic
    ratchet serve runs/from-traffic/agents/v1 --store runs/traffic-v1 --port 8001 &
    python examples/traffic_agent.py --base-url http://127.0.0.1:8001/v1 -n 16 --no-demos

(``agents/v1`` exists if the gate accepted the adapter; ``summary.json`` names the final
version.) Questions use three-digit numbers, so none is one of calc's own probe or test tasks.
The traffic joins the run's own practice: on its own it teaches the embedded model little,
since turns generated with the demonstrations in the prompt are ones the model already finds
likely there (with ``--train-tasks 0``, 48 questions, 21 solved: training loss 0.04, and the
candidate passed none of 16 probe tasks).
"""

import argparse
import json
import math
import os
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
from openai import OpenAI


def tool(name: str, description: str) -> dict:
    numbers = {"a": {"type": "number"}, "b": {"type": "number"}}
    parameters = {"type": "object", "properties": numbers, "required": ["a", "b"]}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


OPERATIONS: dict[str, Callable[[float, float], float]] = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b,
}
FINISH = {
    "type": "function",
    "function": {
        "name": "finish",
        "description": "Submit your final answer.",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
        },
    },
}
TOOLS = [*(tool(name, f"Return a {name} b.") for name in OPERATIONS), FINISH]
SYMBOLS = {"+": "add", "-": "subtract", "*": "multiply"}


def demonstration(text: str, name: str, a: int, b: int) -> list[dict]:
    """A worked question: the call, its result, the answer (turns the application wrote)."""
    result = str(OPERATIONS[name](a, b))

    def call(number: int, tool_name: str, arguments: dict) -> dict:
        function = {"name": tool_name, "arguments": json.dumps(arguments)}
        wire = {"id": f"demo-{number}", "type": "function", "function": function}
        return {"role": "assistant", "content": None, "tool_calls": [wire]}

    return [
        {"role": "user", "content": text},
        call(1, name, {"a": a, "b": b}),
        {"role": "tool", "tool_call_id": "demo-1", "content": result},
        call(2, "finish", {"answer": result}),
        {"role": "tool", "tool_call_id": "demo-2", "content": "Submitted."},
    ]


DEMONSTRATIONS = [
    *demonstration("Compute 212 + 345.", "add", 212, 345),
    *demonstration("Compute 640 * 102.", "multiply", 640, 102),
    *demonstration("Compute 903 - 418.", "subtract", 903, 418),
]


def question(rng: random.Random) -> tuple[str, float]:
    """A question and its answer."""
    a, b, symbol = rng.randint(100, 999), rng.randint(100, 999), rng.choice(list(SYMBOLS))
    return f"Compute {a} {symbol} {b}.", OPERATIONS[SYMBOLS[symbol]](a, b)


def solve(
    client: OpenAI, model: str, text: str, max_turns: int, demos: bool = True
) -> tuple[str | None, str]:
    """Play one question; return the submitted answer (``None``: none) and the conversation id."""
    messages: list[dict] = [*(DEMONSTRATIONS if demos else []), {"role": "user", "content": text}]
    conversation = ""
    for _ in range(max_turns):
        reply = client.chat.completions.create(
            model=model, messages=messages, tools=TOOLS, max_completion_tokens=48
        )
        conversation = (reply.model_extra or {}).get("conversation_id", conversation)
        message = reply.choices[0].message
        if not message.tool_calls:
            return None, conversation
        call = message.tool_calls[0]
        arguments = json.loads(call.function.arguments)
        messages.append(message.model_dump(exclude_none=True))
        if call.function.name == "finish":
            return str(arguments.get("answer")), conversation
        try:
            result = str(OPERATIONS[call.function.name](**arguments))
        except (KeyError, TypeError, ZeroDivisionError) as exc:
            result = f"Error: {exc}"
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None, conversation


def right(answer: str | None, truth: float) -> bool:
    try:
        return answer is not None and math.isclose(float(answer), truth)
    except ValueError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("-n", type=int, default=16, help="questions to ask")
    parser.add_argument("--concurrency", type=int, default=8, help="questions at once")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-demos", dest="demos", action="store_false", help="ask bare")
    args = parser.parse_args()
    key = os.environ.get("RATCHET_SERVE_KEY", "unused")
    client = OpenAI(base_url=args.base_url, api_key=key)
    model = client.models.list().data[0].id
    rng = random.Random(args.seed)
    questions = [question(rng) for _ in range(args.n)]

    def play(item: tuple[str, float]) -> bool:
        text, truth = item
        answer, conversation = solve(client, model, text, args.max_turns, args.demos)
        passed = right(answer, truth)
        verdict = {"conversation_id": conversation, "score": float(passed), "note": text}
        headers = {"Authorization": f"Bearer {key}"}
        httpx.post(f"{args.base_url}/feedback", json=verdict, headers=headers, timeout=60)
        return passed

    with ThreadPoolExecutor(args.concurrency) as pool:
        solved = sum(pool.map(play, questions))
    print(f"{model}: solved {solved} of {args.n}; verdicts sent")


if __name__ == "__main__":
    main()
