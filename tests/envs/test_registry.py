import json
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from ratchet.envs import registry
from ratchet.envs.check import check_env
from ratchet.envs.registry import EnvLoadError, UnknownEnvError, env_names, make_env, register_env

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture
def clean_registry(monkeypatch):
    monkeypatch.setattr(registry, "_registered", dict(registry._registered))
    monkeypatch.setattr(registry, "_loaded", {})
    monkeypatch.syspath_prepend(str(EXAMPLES))


def test_builtin_calc_is_listed_and_loads():
    assert "calc" in env_names()
    assert make_env("calc").name == "calc"


def test_unknown_env_lists_known_ones():
    with pytest.raises(UnknownEnvError, match=r"known envs: .*calc"):
        make_env("no/such")


def test_register_example_env_and_it_passes_the_checks(clean_registry):
    register_env("example/kv", "kv_env:env")
    env = make_env("example/kv")
    assert "example/kv" in env_names()
    report = check_env(env, n=40, split_draws=200)
    assert report.passed, report.results


def test_bad_targets_give_clear_errors(clean_registry):
    with pytest.raises(ValueError, match="module:attr"):
        register_env("x", "no_colon")
    register_env("broken", "no_such_module_xyz:env")
    with pytest.raises(EnvLoadError, match="failed to load: ModuleNotFoundError"):
        make_env("broken")
    register_env("not-an-env", "json:dumps")
    with pytest.raises(EnvLoadError):
        make_env("not-an-env")


def test_entry_points_add_envs(clean_registry, monkeypatch):
    point = EntryPoint("thirdparty/kv", "kv_env:env", registry.ENTRY_POINT_GROUP)

    def fake_entry_points(group, name=None):
        return [p for p in [point] if p.group == group and name in (None, p.name)]

    monkeypatch.setattr(registry, "entry_points", fake_entry_points)
    assert "thirdparty/kv" in env_names()
    assert make_env("thirdparty/kv").description == "Set keys in a key-value store."
    assert "kv_env" in sys.modules


class ProtocolOnly:
    """An env written to the documented protocol alone: no describe, no problem_key."""

    name, description, version, max_difficulty = "protocol-only", "calc by the protocol", "1", 2

    def tasks(self, split, n, seed=0, difficulty=None):
        return make_env("calc").tasks(split, n, seed, difficulty)

    def session(self, task):
        return make_env("calc").session(task)

    def oracle(self, task):
        return make_env("calc").oracle(task)


PROTOCOL_ONLY = ProtocolOnly()


def test_an_env_without_the_optional_members_is_accepted_everywhere(clean_registry):
    assert not hasattr(PROTOCOL_ONLY, "describe")
    register_env("protocol-only", f"{__name__}:PROTOCOL_ONLY")
    env = make_env("protocol-only")
    assert env is PROTOCOL_ONLY
    assert check_env(env, n=10, split_draws=50).passed


def test_load_object_reads_modules_and_files():
    from ratchet.envs.registry import load_object

    assert load_object("json:dumps") is json.dumps
    assert load_object(f"{EXAMPLES / 'kv_env.py'}:env").name == "example/kv"
    with pytest.raises(EnvLoadError, match="names no object"):
        load_object("json")
    with pytest.raises(EnvLoadError, match="AttributeError"):
        load_object("json:no_such_thing")
