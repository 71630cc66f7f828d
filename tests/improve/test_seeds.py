from types import SimpleNamespace

from ratchet.envs.calc import env
from ratchet.improve import seeds
from ratchet.improve.config import ImproveConfig
from ratchet.improve.practice import Practice


def test_each_stream_keeps_the_seed_earlier_runs_drew_with():
    # Pinned: a changed value would make a seeded run draw other tasks than it used to.
    assert seeds.probe(7) == 1_007
    assert seeds.test(7) == 2_007
    assert seeds.practice(7, 3) == 10
    assert seeds.lever_play(7, 3) == 3_007 + 7919 * 3
    assert seeds.curriculum(7, 3) == 7 * 7919 + 3
    assert seeds.resample(5, 2, 1) == 5 * 7919 + 2 * 31 + 1
    assert seeds.resample(2**60, 0, 0) == (2**60 * 7919) % 2**62


def test_streams_of_one_run_do_not_share_a_seed():
    drawn = [seeds.probe(0), seeds.test(0)]
    drawn += [seeds.practice(0, n) for n in range(1, 30)]
    drawn += [seeds.lever_play(0, n) for n in range(1, 30)]
    assert len(set(drawn)) == len(drawn)


def test_a_seeded_run_draws_the_probe_and_test_tasks_it_always_drew():
    config = ImproveConfig(env="calc", probe_tasks=4, test_tasks=4, max_difficulty=2, seed=7)
    practice = Practice(run=SimpleNamespace(config=config, rounds=[]), env=env, backends=None)
    assert [t.id for t in practice.probe_tasks(1, 2).tasks] == [
        "calc-dabe01b1d435",
        "calc-f216460d8682",
        "calc-bcf25e0c2779",
        "calc-14a96a8b59fe",
    ]
    assert [t.id for t in practice.test_tasks()] == [
        "calc-5abe3e557cb3",
        "calc-0ed78a1119aa",
        "calc-7f8ad83e0083",
        "calc-d4ffab7c12dd",
    ]
