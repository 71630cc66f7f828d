"""Which Ray instance `--ray ADDRESS` reaches (a stand-in for the ray module: no Ray needed)."""

import sys
import types

import pytest

from ratchet.cli import options
from ratchet.engine.cluster import RayConfig, RayPool


class _FakeRay(types.ModuleType):
    """Records ``ray.init``'s arguments instead of starting anything."""

    def __init__(self):
        super().__init__("ray")
        self.inits = []
        self.started = False

    def is_initialized(self):
        return self.started

    def init(self, **kwargs):
        self.inits.append(kwargs)
        self.started = True

    def shutdown(self):
        self.started = False

    def kill(self, actor):
        pass

    def remote(self, cls):
        handle = types.SimpleNamespace(remote=lambda *args: object())
        return types.SimpleNamespace(options=lambda **kwargs: handle)


@pytest.fixture
def fake_ray(monkeypatch):
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    return fake


@pytest.mark.parametrize("address", ["local", "auto", "10.0.0.5:6379"])
def test_the_ray_option_reaches_ray_init_as_given(fake_ray, monkeypatch, address):
    monkeypatch.setenv("RAY_ADDRESS", "10.9.9.9:6379")
    with options.ray_pool(address, "calc", workers=1, episodes=2, base_url=None, threads=None):
        pass
    assert fake_ray.inits[0]["address"] == address
    assert not fake_ray.started  # the pool shut down the instance it started


def test_a_private_instance_takes_num_cpus_and_a_joined_cluster_does_not(fake_ray):
    with RayPool("calc", {}, RayConfig("local", 1, 2, num_cpus=2)):
        pass
    with RayPool("calc", {}, RayConfig("auto", 1, 2, num_cpus=2)):
        pass
    assert [init["num_cpus"] for init in fake_ray.inits] == [2, None]
