from dataclasses import replace

from search_fakes import TASKS, eager, roots

from ratchet.core.verdict import Verdict
from ratchet.improve.explore.branch import Branch
from ratchet.improve.explore.credit import turn_advantages
from ratchet.improve.explore.tree import nodes
from ratchet.improve.levers.grpo import scored_groups


def parent_and_branch():
    task = TASKS[0]
    (parent,) = roots(eager(), [task])  # add, finish: fails
    (node,) = [n for n in nodes([parent], max_turns=4) if n.turn == 1]
    branch = Branch(replies=node.replies(), seen=node.seen(), tried=node.tried, parent=0)
    (child,) = roots(eager(), [task], steer=lambda t, s: branch)  # add, multiply, finish
    assert not parent.passed and child.passed
    return parent, child


def test_credit_goes_to_the_turn_where_a_success_and_a_failure_parted():
    parent, child = parent_and_branch()
    failed, passed = turn_advantages([parent, child])
    assert failed == (0.0, -1.0)  # the shared first call earns nothing; the early finish loses
    assert passed == (0.0, 1.0, 0.0)  # the second call earns it all; the finish after it none


def test_a_group_that_never_parted_gives_no_credit_and_grpo_uses_the_turns():
    parent, child = parent_and_branch()
    assert turn_advantages([parent, parent]) == [None, None]
    scored = scored_groups({parent.task.id: [parent, child]}, limit=10)
    assert [s.turn_advantages for s in scored] == [(0.0, -1.0), (0.0, 1.0, 0.0)]
    assert [s.advantage for s in scored] == [-1.0, 1.0]


def test_two_finishes_with_different_answers_are_different_actions_for_credit():
    parent, child = parent_and_branch()
    right = next(s for s in child.steps if s.call.name == "finish")
    answered = parent.steps[0]
    good = replace(parent, steps=(answered, right), verdict=Verdict.of(True))
    assert turn_advantages([parent, good]) == [(0.0, -1.0), (0.0, 1.0)]
