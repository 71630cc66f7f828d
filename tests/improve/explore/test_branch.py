import itertools
import json

import jsonschema
from search_fakes import TASKS, eager, roots

from ratchet.core.agent import Agent
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.engine.models.base import Completion, offered_tools
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import rollout
from ratchet.envs.calc import env
from ratchet.envs.registry import make_env
from ratchet.improve.explore.branch import Branch
from ratchet.improve.explore.strategies import (
    FINISH_KEY,
    POLICY,
    Strategy,
    action_key,
    strategy_named,
)
from ratchet.improve.explore.tree import Weights, choose, nodes


def test_a_root_plays_the_agent_as_it_is_and_records_it():
    (episode,) = roots(eager(), TASKS[:1], steer=lambda t, s: Branch(temperature=0.9))
    assert [c.name for c in episode.calls] == [env.oracle(TASKS[0])[0].name, "finish"]
    record = episode.exploration
    assert record.own and record.temperature == 0.9 and record.parent is None
    assert record.branch_turn == 0 and record.distinct and record.replay_matched


def branch_from(parent, turn, **fields):
    """A branch that replays ``parent``'s first ``turn`` turns and must differ from its next."""
    (node,) = [n for n in nodes([parent], max_turns=6) if n.turn == turn]
    return Branch(
        replies=node.replies(),
        seen=node.seen(),
        tried=node.tried,
        parent=parent.sample,
        **fields,
    )


def test_replay_restores_the_parents_state_and_the_branch_takes_a_new_action():
    task = TASKS[0]
    (parent,) = roots(eager(), [task])  # add, then finish: one step short
    assert not parent.passed
    branch = branch_from(parent, 1)
    assert branch.tried == (FINISH_KEY,)
    (child,) = roots(eager(), [task], steer=lambda t, s: branch)
    assert child.steps[0].observation.text == parent.steps[0].observation.text
    assert child.steps[0].completion_tokens == 0  # replayed, not generated
    assert action_key(child.steps[1]) != FINISH_KEY and child.passed
    record = child.exploration
    assert record.parent == 0 and record.branch_turn == 1 and record.distinct
    assert record.replay_matched and not record.own


def test_a_branching_action_that_repeats_a_tried_one_is_drawn_again_then_forced_elsewhere():
    task = TASKS[1]
    (parent,) = roots(eager(calls=2), [task])
    first = parent.calls[0]
    seeds = []

    def same_again(prompt, rng):  # makes the parent's first call whenever it may
        seeds.append(prompt.seed)
        allowed = [t["function"]["name"] for t in prompt.reply_tools or prompt.tools]
        if first.name in allowed:
            return json.dumps({"name": first.name, "arguments": first.arguments})
        name = next(n for n in allowed if n != "finish")
        return json.dumps({"name": name, "arguments": {"a": 2, "b": 3}})

    from ratchet.engine.models.fake import FakeModel

    branch = branch_from(parent, 0, tries=2, draw=5)
    (child,) = roots(FakeModel(reply=same_again), [task], steer=lambda t, s: branch)
    assert child.calls[0].name != first.name and child.exploration.distinct
    assert len(set(seeds[:3])) == 3  # each resample drew with its own seed
    assert child.exploration.discarded_tokens > 0


def test_a_drawn_branch_calls_a_tool_not_tried_at_its_node():
    task = TASKS[2]
    (parent,) = roots(eager(), [task])
    branch = branch_from(parent, 0, strategy=Strategy("drawn", drawn_tool=True), draw=3)
    (child,) = roots(eager(), [task], steer=lambda t, s: branch)
    assert child.calls[0].name not in {parent.calls[0].name, "finish"}
    assert child.exploration.strategy == "drawn"


def test_a_world_that_answers_a_replay_otherwise_is_noticed():
    task = TASKS[0]
    (parent,) = roots(eager(), [task])
    branch = branch_from(parent, 1)
    wrong = Branch(
        replies=branch.replies,
        seen=("something else",),
        tried=branch.tried,
        parent=0,
        strategy=POLICY,
    )
    (child,) = roots(eager(), [task], steer=lambda t, s: wrong)
    assert not child.exploration.replay_matched


def test_the_tree_branches_first_where_the_agent_finished_too_early():
    task = TASKS[0]
    (parent,) = roots(eager(), [task])
    found = nodes([parent], max_turns=4)
    assert [n.turn for n in found] == [0, 1]
    assert choose(found, reach=1, weights=Weights()).turn == 1  # a premature finish
    # Nothing left to branch once every node tried its most actions.
    assert choose(found, reach=1, weights=Weights(max_tried=1)) is None


def test_nodes_stop_at_a_failed_call_and_leave_room_for_an_action_and_finish():
    task = TASKS[0]
    failed = ToolCall("divide", {"a": 1, "b": 0})
    replies = (Completion("", tool_calls=(failed,)),)
    (episode,) = roots(eager(), [task], steer=lambda t, s: Branch(replies=replies, seen=()))
    assert episode.steps[0].failed
    assert [n.turn for n in nodes([episode], max_turns=6)] == [0]  # not past the error
    (parent,) = roots(eager(), [task])
    assert [n.turn for n in nodes([parent], max_turns=2)] == [0]


def test_a_state_reached_by_two_prefixes_counts_both_visits_by_the_envs_fingerprint():
    from ratchet.engine.harness import replay
    from ratchet.envs.grid import env as grid

    task = grid.tasks("train", 1, seed=1, difficulty=1)[0]
    door = next(d for d in ("north", "south", "east", "west") if d in task.instruction)
    move, look = ToolCall("move", {"to": door}), ToolCall("look", {})
    direct = replay(grid, task, [move, ToolCall("finish", {"answer": ""})])
    looked = replay(grid, task, [look, move, ToolCall("finish", {"answer": ""})])
    assert direct.steps[0].state == looked.steps[1].state is not None
    found = nodes([direct, looked], max_turns=6)
    after_move = [n for n in found if n.turn == 1 and n.source is direct]
    assert after_move[0].visits == 1 and after_move[0].reached == 2


def test_a_closing_branch_finishes_where_an_episode_went_on_instead_of_stopping():
    task = TASKS[3]
    (runaway,) = roots(eager(calls=99), [task])  # the plan's calls, then more: never finishes
    assert not runaway.passed and "finish" not in [c.name for c in runaway.calls]
    found = nodes([runaway], max_turns=4)
    node = choose(found, reach=1, weights=Weights(), closing=True)
    assert node is not None and node.turn == 2  # after the plan's two calls, within reach + 1
    close = Strategy("close", copy_arguments=True, chain=True, closes=True)
    branch = Branch(close, replies=node.replies(), seen=node.seen(), tried=node.tried, parent=0)
    (child,) = roots(eager(calls=99), [task], steer=lambda t, s: branch)
    assert child.calls[-1].name == "finish" and child.passed
    assert child.exploration.strategy == "close" and child.exploration.branch_turn == 2


def test_a_chain_branch_counts_the_replayed_calls_values_as_spent():
    task = TASKS[0]
    (parent,) = roots(eager(), [task])  # the first operation, then finish with its result
    first = parent.calls[0]
    offered = []
    inner = eager()

    def watching(prompt, rng):
        offered.append(prompt.reply_tools)
        return inner.reply(prompt, rng)

    from ratchet.engine.models.fake import FakeModel
    from ratchet.improve.explore.strategies import strategy_named

    branch = branch_from(parent, 1, strategy=strategy_named("chain"))
    roots(FakeModel(reply=watching), [task], steer=lambda t, s: branch)
    values = {
        value
        for tool in offered[0]
        for option in tool["function"]["parameters"].get("anyOf", [])
        for schema in option["properties"].values()
        for value in schema.get("enum", [])
    }
    result = float(parent.steps[0].observation.text)
    assert result in values
    assert not values & set(first.arguments.values())  # passed by the replayed call


def test_a_closing_branch_gives_an_answer_not_given_at_its_node_yet():
    files = make_env("files")
    lookups = files.tasks("train", 30, seed=5, difficulty=1)
    task = next(t for t in lookups if t.family == "lookup" and ".json" in t.instruction)
    read = ToolCall("read_file", {"path": files.oracle(task)[0].arguments["path"]})
    offered = []

    def first_span(prompt, rng):  # made to finish, answers with the first value it may
        (finish,) = [t for t in offered_tools(prompt) if t["function"]["name"] == "finish"]
        parameters = finish["function"]["parameters"]
        options = parameters.get("anyOf", [parameters])
        answers = [a for o in options for a in o["properties"]["answer"].get("enum", [])]
        offered.append(answers)
        return json.dumps({"name": "finish", "arguments": {"answer": answers[0]}})

    def close_once(parents, weights):
        node = choose(nodes(parents, max_turns=4), reach=1, weights=weights, closing=True)
        if node is None:
            return None
        close = strategy_named("close")
        branch = Branch(close, replies=node.replies(), seen=node.seen(), tried=node.tried,
                        answers=node.answers, parent=0)  # fmt: skip
        (child,) = rollout(files, [task], Agent(model="fake"), FakeModel(reply=first_span),
                           steer=lambda t, s: branch)  # fmt: skip
        return child

    # The agent read the file, then answered with a wrong part of it; each close tries another.
    gave_up = replay(files, task, [read, ToolCall("finish", {"answer": "?"})])
    parents = [close_once([gave_up], Weights())]
    for _ in range(3):
        parents.append(close_once(parents, Weights()))
    given = [child.calls[-1].arguments["answer"] for child in parents]
    assert all(child.exploration.distinct and not child.passed for child in parents)
    assert len(set(given)) == 4
    assert all(not set(given[:i]) & set(offered[i]) for i in range(1, 4))
    assert close_once(parents, Weights()) is None  # four answers given there: spent
    right = close_once(parents, Weights(max_answers=5))
    assert right.passed and right.calls[-1].arguments["answer"] not in given


def test_a_copying_branch_takes_its_tried_tool_with_other_arguments_without_resampling():
    task = TASKS[1]
    (parent,) = roots(eager(), [task])
    first = parent.calls[0]

    def sure_of_its_call(prompt, rng):  # the parent's call if it may, else the nearest one
        (offered,) = [t for t in offered_tools(prompt) if t["function"]["name"] == first.name]
        parameters = offered["function"]["parameters"]
        for option in parameters.get("anyOf", [parameters]):
            validator = jsonschema.Draft202012Validator(option)
            choices = [
                sorted(s.get("enum", []), key=lambda v, n=n: v != first.arguments[n])
                for n, s in option["properties"].items()
            ]
            for values in itertools.product(*choices):
                arguments = dict(zip(option["properties"], values, strict=True))
                if validator.is_valid(arguments):
                    return json.dumps({"name": first.name, "arguments": arguments})
        raise AssertionError("no call of the tried tool was offered")

    branch = branch_from(parent, 0, strategy=strategy_named("copy"), tries=2, draw=5)
    (child,) = roots(FakeModel(reply=sure_of_its_call), [task], steer=lambda t, s: branch)
    assert child.calls[0].name == first.name and child.calls[0] != first
    assert child.exploration.distinct and child.exploration.discarded_tokens == 0


def test_the_tree_does_not_go_past_a_step_beyond_reach_before_trying_the_nodes_before_it():
    task = TASKS[0]
    first = env.oracle(task)[0]
    result = replay(env, task, [first]).steps[0].observation.text
    stopped = replay(env, task, [first, ToolCall("finish", {"answer": result})])
    wrong = ToolCall("add", {"a": 1, "b": 1})
    went_on = replay(env, task, [first, wrong, ToolCall("finish", {"answer": "2"})])
    found = nodes([stopped, went_on], max_turns=6)
    assert [(n.turn, n.reached) for n in found] == [(0, 1), (1, 1), (2, 1)]
    # Past the wrong second step lies a node where only finish was tried, beyond the agent's
    # reach of one call: no premature finish there, and the nodes before it are as novel.
    assert choose(found, reach=1, weights=Weights()).turn == 0


def test_a_closing_branch_goes_first_where_the_agent_stalled_by_repeating_its_call():
    files = make_env("files")
    lookups = files.tasks("train", 30, seed=5, difficulty=1)
    task = next(t for t in lookups if t.family == "lookup")
    (read,) = [c for c in files.oracle(task) if c.name != "finish"]
    stalled = replay(files, task, [read, read, read])  # read the value, then read it again
    folders = [ToolCall("list_files", {"path": p}) for p in (".", "config", "logs")]
    wandered = replay(files, task, folders)  # went on, deeper, without repeating itself
    found = nodes([stalled, wandered], max_turns=6)
    node = choose(found, reach=1, weights=Weights(), closing=True)
    assert node is not None and node.source is stalled and node.turn == 1 and node.stalled
