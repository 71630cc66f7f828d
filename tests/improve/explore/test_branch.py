import json

from search_fakes import TASKS, eager, roots

from ratchet.core.tool import ToolCall
from ratchet.engine.models.base import Completion
from ratchet.envs.calc import env
from ratchet.improve.explore.branch import Branch
from ratchet.improve.explore.strategies import FINISH_KEY, POLICY, Strategy, action_key
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
