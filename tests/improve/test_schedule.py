from ratchet.improve.schedule import alpha_shares, sits_out, sitting_out


def record(number, *candidates):
    return {
        "round": number,
        "candidates": [
            {"lever": lever, "version": version, "probe_gain": gain}
            if version
            else {"lever": lever, "version": None, "reason": "nothing to propose"}
            for lever, version, gain in candidates
        ],
    }


def test_a_lever_whose_candidate_lost_sits_out_the_next_round_only():
    rounds = [record(1, ("rft", "v1", 0.3), ("exemplars", "v2", -0.33))]
    reason = sits_out(rounds, "exemplars")
    assert reason is not None and "sits out this round" in reason and "33 probe points" in reason
    assert sits_out(rounds, "rft") is None
    rounds.append(record(2, ("rft", "v3", 0.1), ("exemplars", None, 0.0)))
    assert sits_out(rounds, "exemplars") is None  # back after one round out


def test_a_lever_whose_last_two_candidates_lost_proposes_no_more():
    rounds = [
        record(1, ("exemplars", "v1", -0.1)),
        record(2, ("exemplars", None, 0.0)),
        record(3, ("exemplars", "v2", -0.05)),
        record(4, ("exemplars", None, 0.0)),
    ]
    reason = sits_out(rounds, "exemplars")
    assert reason is not None and "rest of the run" in reason and "(-10, -5)" in reason


def test_a_gain_or_a_tie_between_losses_resets_the_count():
    rounds = [record(1, ("rft", "v1", -0.1)), record(2, ("rft", "v2", 0.0))]
    assert sits_out(rounds, "rft") is None
    assert sits_out([], "rft") is None


def test_when_every_lever_would_sit_out_the_ones_out_for_one_round_propose():
    rounds = [
        record(1, ("rft", "v1", -0.1), ("exemplars", "v2", -0.2)),
        record(2, ("rft", "v3", -0.04), ("exemplars", None, 0.0)),
    ]
    # exemplars lost once and sat out once: it is back; rft lost twice: out for the run.
    assert sitting_out(rounds, ["rft", "exemplars"]) == {
        "rft": sits_out(rounds, "rft"),
        "exemplars": None,
    }
    both_lost = [record(1, ("rft", "v1", -0.04), ("exemplars", "v2", -0.3))]
    assert sitting_out(both_lost, ["rft", "exemplars"]) == {"rft": None, "exemplars": None}
    one_lost = [record(1, ("rft", "v1", 0.2), ("exemplars", "v2", -0.3))]
    assert sitting_out(one_lost, ["rft", "exemplars"])["exemplars"] is not None
    for_good = [record(1, ("rft", "v1", -0.1)), record(2, ("rft", "v2", -0.1))]
    assert sitting_out(for_good, ["rft"])["rft"] is not None


def test_a_levers_share_of_alpha_follows_its_accepted_candidates():
    assert alpha_shares([], ["rft", "exemplars"]) == {"rft": 0.5, "exemplars": 0.5}
    first = record(1, ("exemplars", "v1", 0.17), ("rft", "v2", 0.75))
    first["candidates"][1]["accepted"] = True
    rounds = [first, record(2, ("exemplars", None, 0.0), ("rft", "v3", 0.1))]
    # rft: 1 of 2 accepted; exemplars: 0 of 1 (a round it sat out counts for nothing).
    assert alpha_shares(rounds, ["rft", "exemplars"]) == {"rft": 0.5, "exemplars": 1 / 3}
    assert alpha_shares(rounds[:1], ["rft", "exemplars"]) == {"rft": 2 / 3, "exemplars": 1 / 3}
