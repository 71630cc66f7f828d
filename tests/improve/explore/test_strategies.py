import jsonschema

from ratchet.core.tool import ToolCall
from ratchet.engine.models.base import Prompt
from ratchet.envs.grid import POLICY
from ratchet.envs.grid import env as grid
from ratchet.improve.explore.strategies import (
    STRATEGIES,
    Strategy,
    Track,
    drawn_tool,
    reply_tools,
    strategy_named,
)


def grid_prompt(*replies):
    task = grid.tasks("train", 1, seed=2, difficulty=1)[0]
    session = grid.session(task)
    first = session.reset()
    messages = [{"role": "system", "content": "Act."}, {"role": "user", "content": first.text}]
    for call in replies:
        observation = session.step(call)
        messages += [
            {"role": "assistant", "tool_calls": [call.to_openai()]},
            {"role": "tool", "name": call.name, "content": observation.text},
        ]
    return task, Prompt(tuple(messages), first.tools)


def names(tools):
    return [t["function"]["name"] for t in tools]


def test_copying_narrows_closed_sets_to_this_tasks_mentions_not_the_envs_shared_rules():
    task, prompt = grid_prompt()
    copy = strategy_named("copy")
    (take,) = [
        t for t in reply_tools(copy, prompt, Track(), shared=POLICY) if names([t]) == ["take"]
    ]
    items = take["function"]["parameters"]["properties"]["item"]["enum"]
    assert all(item in task.instruction for item in items)  # the room and the goal, no recipe
    (loose,) = [t for t in reply_tools(copy, prompt, Track()) if names([t]) == ["take"]]
    assert len(loose["function"]["parameters"]["properties"]["item"]["enum"]) > len(items)


def test_a_branching_turn_avoids_tools_and_extend_withholds_finish():
    _, prompt = grid_prompt()
    plain = strategy_named("policy")
    assert reply_tools(plain, prompt, Track()) is None
    avoided = reply_tools(plain, prompt, Track(), avoid=frozenset({"finish", "look"}))
    assert "finish" not in names(avoided) and "look" not in names(avoided)
    extend = strategy_named("extend")
    assert "finish" not in names(reply_tools(extend, prompt, Track()))
    assert reply_tools(extend, prompt, Track(acted=2)) is None  # two acting calls made
    assert names(reply_tools(plain, prompt, Track(), tool="look")) == ["look"]


def test_skipping_repeats_leaves_out_the_argument_free_call_just_made():
    _, prompt = grid_prompt(ToolCall("look", {}))
    skip = Strategy("skip", skip_repeats=True)
    assert "look" not in names(reply_tools(skip, prompt, Track()))
    _, moved = grid_prompt(ToolCall("move", {"to": "north"}))
    assert reply_tools(skip, moved, Track()) is None  # a call with arguments may be repeated


def test_the_built_in_strategies_are_named_once_and_unknown_names_refused():
    assert len({s.name for s in STRATEGIES}) == len(STRATEGIES)
    try:
        strategy_named("guess")
    except ValueError as exc:
        assert "policy" in str(exc)
    else:
        raise AssertionError("an unknown strategy was accepted")


def test_every_second_drawn_tool_is_one_the_task_names():
    tools = dict.fromkeys(["delete_file", "list_files", "move_file", "read_file"], "A tool.")
    task = "In the workspace: Move a.log into logs/; delete b.tmp."
    assert {drawn_tool(tools, task, draw) for draw in range(0, 8, 2)} == {
        "delete_file",
        "move_file",
    }
    assert [drawn_tool(tools, task, draw) for draw in range(1, 9, 2)] == list(tools)
    described = {"look": "Describe the room.", "take": "Pick up an item."}
    assert {drawn_tool(described, "Find the wood and pick it up.", d) for d in (0, 2)} == {"take"}


def test_a_tool_is_named_by_any_word_of_its_name_not_only_its_first():
    tools = dict.fromkeys(["list_files", "read_file", "read_value", "search"], "Return text.")
    lookup = "What is the value of 'port' in config/auth.json? Call finish with just the value."
    assert {drawn_tool(tools, lookup, draw) for draw in range(0, 8, 2)} == {"read_value"}
    shop = dict.fromkeys(["get_order", "refund_order", "list_products", "a_helper"], "Do it.")
    refund = "Refund order O-1042 for a customer, then finish."
    assert {drawn_tool(shop, refund, draw) for draw in range(0, 8, 2)} == {
        "get_order",
        "refund_order",
    }


def test_list_lets_an_answer_join_the_values_a_task_asks_for_together():
    from ratchet.engine.harness import replay
    from ratchet.envs.files import env as files

    # "What are the values of A and B? ... separated by commas": after reading both, the
    # answer is two read values joined, which no single span of the conversation is.
    task = next(t for t in files.tasks("train", 40, seed=0, difficulty=2) if t.family == "lookup")
    *reads, answer = files.oracle(task)
    played = replay(files, task, reads)
    prompt = Prompt(tuple(played.messages), tuple(played.tools))
    arguments = answer.arguments

    def admits(strategy):
        offered = reply_tools(strategy, prompt, Track(), tool="finish")
        schema = next(t for t in offered if t["function"]["name"] == "finish")
        return jsonschema.Draft202012Validator(schema["function"]["parameters"]).is_valid(arguments)

    assert ", " in arguments["answer"]
    assert admits(strategy_named("list"))
    assert not admits(strategy_named("copy"))
    assert replay(files, task, [*reads, answer]).passed
