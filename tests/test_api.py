import subprocess
import sys

import pytest

import ratchet
from ratchet.envs.calc import env as calc


def test_the_public_api_is_exactly_all():
    public = {name for name in vars(ratchet) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(ratchet, name)).__name__ == "module"}
    assert public - modules == set(ratchet.__all__)
    assert all(hasattr(ratchet, name) for name in ratchet.__all__)


def test_importing_ratchet_does_not_load_heavy_dependencies():
    code = (
        "import sys, ratchet; print(sorted({'torch', 'transformers', 'peft'} & set(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"


def test_the_command_line_starts_without_models_or_charts():
    code = (
        "import sys, ratchet.cli; heavy = {'torch', 'transformers', 'peft', 'matplotlib'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"


@pytest.mark.parametrize(("old", "new"), [("Limits", "Budget"), ("play", "replay"),
                                          ("decide", "decide_round")])  # fmt: skip
def test_names_renamed_in_the_last_release_still_work_with_a_warning(old, new):
    with pytest.warns(DeprecationWarning, match=f"ratchet.{old} is deprecated.*use ratchet.{new}"):
        value = getattr(ratchet, old)
    assert old not in ratchet.__all__ and new in ratchet.__all__
    if old == "Limits":
        assert value is ratchet.Budget


def test_the_renamed_functions_do_what_they_did():
    task = calc.tasks("test", 1)[0]
    with pytest.warns(DeprecationWarning):
        played = ratchet.play(calc, task, calc.oracle(task), "scripted-v1")
    assert played.passed and played.agent == "scripted-v1"
    incumbent = [ratchet.replay(calc, t, []) for t in calc.tasks("probe", 8)]
    candidate = [ratchet.replay(calc, t, calc.oracle(t)) for t in calc.tasks("probe", 8)]
    with pytest.warns(DeprecationWarning):
        decision = ratchet.decide(incumbent, candidate, ratchet.GateConfig())
    assert decision.accepted and decision.probe_gain == 1.0


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Limitz'"):
        ratchet.Limitz  # noqa: B018
