import ast
import dataclasses
import inspect

import pytest

import ratchet.core.env_defaults as env_defaults
from ratchet.core.env import SimpleEnv
from ratchet.core.env_defaults import (
    OPTIONAL_MEMBERS,
    Attack,
    EnvDefaults,
    accepted_findings_of,
    attacks_of,
    default_of,
    describer,
    left_out,
    max_sessions_of,
    params_schema_of,
    policy_of,
    pool_of,
    problem_key_of,
    task_builder,
    thread_safe_of,
)
from ratchet.core.pool import TaskPool
from ratchet.core.task import TaskSpec, canonical_key
from ratchet.core.verdict import Verdict


def member_docstrings():
    """Each member declared on EnvDefaults with the docstring written under it."""
    (cls,) = [
        node
        for node in ast.parse(inspect.getsource(env_defaults)).body
        if isinstance(node, ast.ClassDef) and node.name == "EnvDefaults"
    ]
    docs = {}
    for node, after in zip(cls.body, cls.body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr):
            docs[node.target.id] = after.value.value
    return docs


def say_hi(rng, difficulty):
    return TaskSpec("Say hi.", {"n": rng.randrange(9)})


def minimal_env(**members):
    return SimpleEnv(
        **{"sample": say_hi, **members},
        name="toy",
        description="toy",
        build=lambda task: {},
        tools=lambda world: [],
        verify=lambda task, world, answer: Verdict.of(answer == "hi"),
        oracle=lambda task: [],
    )


def test_every_optional_member_is_typed_and_says_what_happens_without_it():
    docs = member_docstrings()
    assert list(docs) == list(OPTIONAL_MEMBERS)
    assert {"describe", "problem_key", "task_from_params", "attacks"} <= set(OPTIONAL_MEMBERS)
    for member, doc in docs.items():
        assert "Without" in doc, member


def test_simple_env_has_every_optional_member_with_the_same_defaults():
    fields = {field.name for field in dataclasses.fields(SimpleEnv)}
    assert set(OPTIONAL_MEMBERS) <= fields
    assert set(left_out(minimal_env())) == set(OPTIONAL_MEMBERS) - {"sample"}


def test_an_env_without_any_optional_member_gets_every_default():
    bare = object()
    assert left_out(bare) == OPTIONAL_MEMBERS
    assert describer(bare) is None and task_builder(bare) is None and pool_of(bare) is None
    assert problem_key_of(bare) is canonical_key and policy_of(bare) == ""
    assert params_schema_of(bare) == {"type": "object"}
    assert thread_safe_of(bare) and max_sessions_of(bare) is None
    assert accepted_findings_of(bare) == {} and attacks_of(bare) == ()


def test_a_subclass_inherits_the_defaults_and_overrides_what_it_gives():
    class Parser(EnvDefaults):
        policy = "Parse only what you are given."
        thread_safe = False

        def describe(self, trajectory):
            return None

    parser = Parser()
    assert parser.problem_key({"b": 1, "a": 2}) == canonical_key({"a": 2, "b": 1})
    assert set(OPTIONAL_MEMBERS) - set(left_out(parser)) == {"policy", "thread_safe", "describe"}
    assert policy_of(parser) == "Parse only what you are given." and not thread_safe_of(parser)
    assert describer(parser) is not None


def test_members_given_are_not_left_out_and_are_read_as_given():
    attack = Attack("constant", lambda task: [])
    env = minimal_env(
        describe=lambda trajectory: None,
        attacks=(attack,),
        max_sessions=0,
        accepted_findings={"red-team: hedged answer": "the benchmark's rule"},
        sample=TaskPool(train=[TaskSpec("Say hi.", {"n": 1})], probe=[], test=[]),
    )
    assert set(left_out(env)) == {
        "policy",
        "problem_key",
        "task_from_params",
        "params_schema",
        "split_of_params",
        "thread_safe",
    }
    assert attacks_of(env) == (attack,) and max_sessions_of(env) == 1
    assert pool_of(env) is env.sample


def test_default_of_an_unknown_member_names_the_known_ones():
    assert default_of("thread_safe") is True
    with pytest.raises(KeyError, match="'render' is not an optional env member"):
        default_of("render")
