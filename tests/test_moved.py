import importlib

import pytest


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("ratchet.core.records", "ratchet.core.serialise", "to_json"),
        ("ratchet.serve.memory", "ratchet.serve.conversations", "ServedMemory"),
        ("ratchet.engine.models.weights", "ratchet.engine.models.checkpoints", "cache_root"),
    ],
)
def test_a_renamed_module_still_gives_its_names_with_a_warning_naming_the_new_one(old, new, name):
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated.*use {new}.{name}"):
        value = getattr(importlib.import_module(old), name)
    assert value is getattr(importlib.import_module(new), name)


def test_a_name_the_new_module_lacks_is_an_attribute_error():
    old = importlib.import_module("ratchet.core.records")
    with pytest.raises(AttributeError, match="no_such_name"):
        old.no_such_name  # noqa: B018


def test_the_warning_points_at_the_line_that_imports_the_old_path():
    with pytest.warns(DeprecationWarning) as caught:
        from ratchet.core.records import to_dict  # noqa: F401
    assert caught[0].filename == __file__
