import warnings

import pytest

from ratchet.core.serialise import from_dict, to_dict
from ratchet.improve.config import ImproveConfig
from ratchet.improve.levers import make_levers
from ratchet.improve.levers.options import (
    checked_lever_options,
    lever_settings,
    parse_lever_options,
)


def test_a_levers_settings_are_its_dataclass_fields_an_option_can_set():
    assert lever_settings("pairs")["beta"] is float
    assert "name" not in lever_settings("pairs")
    assert "proposer" not in lever_settings("tasks")  # an object, set from Python only
    with pytest.raises(ValueError, match="unknown lever 'pair' in a lever option"):
        lever_settings("pair")


def test_options_are_parsed_from_text_and_converted_to_the_fields_types():
    given = parse_lever_options(["pairs.beta=0.25", "pairs.steps= 7", "demos.with_own=false"])
    assert given == {"pairs": {"beta": "0.25", "steps": "7"}, "demos": {"with_own": "false"}}
    checked = checked_lever_options(given, ["pairs", "demos"])
    assert checked == {"pairs": {"beta": 0.25, "steps": 7}, "demos": {"with_own": False}}
    assert checked_lever_options({"pairs": {"beta": 1}}, ["pairs"]) == {"pairs": {"beta": 1.0}}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pairs": {"steps": "1.5"}}, "pairs.steps takes an int; got '1.5'"),
        ({"pairs": {"steps": 2.0}}, "pairs.steps takes an int; got 2.0"),
        ({"pairs": {"beta": True}}, "pairs.beta takes a float; got True"),
        ({"pairs": {"lora": 8}}, "lever pairs has no setting 'lora'; its settings: steps"),
        ({"rft": {"steps": 8}}, "sets rft, which is not among the run's levers (pairs)"),
    ],
)
def test_a_bad_option_is_refused_with_what_was_wrong(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        checked_lever_options(options, ["pairs"])


@pytest.mark.parametrize(
    "text", ["pairs.beta", "beta=0.1", ".beta=0.1", "pairs.=0.1", "pairs.beta= "]
)
def test_text_not_of_the_form_lever_field_value_is_refused(text):
    with pytest.raises(ValueError, match=r"--lever-option takes LEVER\.FIELD=VALUE"):
        parse_lever_options([text])


def test_a_setting_given_twice_is_refused():
    with pytest.raises(ValueError, match=r"sets pairs\.beta twice"):
        parse_lever_options(["pairs.beta=0.1", "pairs.beta=0.2"])


def test_the_run_builds_its_levers_with_the_options_over_the_training_budget():
    config = ImproveConfig(
        env="calc",
        levers=("exemplars", "pairs", "grpo"),
        train_steps=12,
        lever_options={"pairs": {"beta": 0.3, "steps": 5}, "exemplars": {"per_task": 1}},
    )
    exemplars, pairs, grpo = make_levers(config.levers, config.lever_arguments())
    assert (pairs.beta, pairs.steps, grpo.steps, grpo.beta) == (0.3, 5, 12, 0.04)
    assert exemplars.per_task == 1


def test_an_old_lever_setting_moves_to_the_lever_options_with_a_warning():
    with pytest.warns(DeprecationWarning) as caught:
        config = ImproveConfig(env="calc", levers=("pairs", "rft"), beta=0.2, learning_rate=1e-4)
    said = [str(warning.message) for warning in caught]
    assert any("use --lever-option pairs.beta=0.2 --lever-option grpo.beta=0.2" in s for s in said)
    assert any("--learning-rate are deprecated" in s for s in said)
    assert config.beta is None and config.learning_rate is None
    assert config.lever_options == {
        "pairs": {"beta": 0.2, "learning_rate": 1e-4},
        "rft": {"learning_rate": 1e-4},
    }


def test_a_run_saved_with_the_old_fields_reads_back_as_the_same_settings():
    old = {**to_dict(ImproveConfig(env="calc", levers=("pairs", "rft"))), "lever_options": {}}
    old.update(train_length_exponent=0.5, chosen_nll_weight=0.0, anchor_weight=0.0)
    old.update(demos="oracle", beta=0.3, learning_rate=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        saved = from_dict(ImproveConfig, old)
    # The defaults of the time add nothing; only the setting that was changed carries over.
    assert saved.lever_options == {"pairs": {"beta": 0.3}}
    assert saved == ImproveConfig(
        env="calc", levers=("pairs", "rft"), lever_options={"pairs": {"beta": 0.3}}
    )
