import importlib

import pytest

import ratchet.integrations as integrations


def test_every_public_name_comes_from_its_module():
    assert sorted(integrations.__all__) == sorted(integrations._HOMES)
    for name in integrations.__all__:
        home = integrations._HOMES[name]
        module = importlib.import_module(f"ratchet.integrations.{home}")
        assert getattr(integrations, name) is getattr(module, name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'adapters'"):
        _ = integrations.adapters  # type: ignore[attr-defined]


def test_the_old_package_name_is_gone():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ratchet.adapters")
