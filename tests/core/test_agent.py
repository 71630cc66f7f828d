import pytest

from ratchet.core.agent import Agent, Exemplar, Insight, load_agent


def test_save_load_round_trip(tmp_path):
    agent = Agent(
        model="fake",
        insights=(Insight("Check the arithmetic.", helpful=2),),
        exemplars=(Exemplar("calc", "word", 2, "Ana has 3 apples...", ({"role": "tool"},)),),
        adapter="adapter",
    )
    child = agent.derive("v1", "exemplars", notes={"probe_gain": 0.2})
    loaded, directory = load_agent(str(child.save(tmp_path / "v1")))
    assert loaded == child and directory == tmp_path / "v1"
    assert loaded.parent == "base" and loaded.lever == "exemplars"
    assert loaded.adapter_path(directory) == tmp_path / "v1" / "adapter"


def test_builtins_and_bad_references(tmp_path):
    assert load_agent("oracle")[0].scripted
    assert not load_agent("base", model="fake")[0].scripted
    with pytest.raises(ValueError, match="not base, oracle, null or a directory"):
        load_agent(str(tmp_path / "missing"))
    (tmp_path / "agent.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a valid agent file"):
        load_agent(str(tmp_path))
