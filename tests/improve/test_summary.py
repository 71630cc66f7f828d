from ratchet.improve.summary import exploration_lines


def test_the_search_line_names_each_strategys_passes_and_relabels_per_level():
    record = {
        "roots": [3, 64],
        "searched": 20,
        "solved": 2,
        "branches": 75,
        "strategies": {
            "chain": {"1": [20, 2, 1500, 0], "2": [55, 1, 2900, 10]},
            "policy": {"2": [71, 1, 3800]},  # a record made before relabels were counted
        },
        "deterministic": True,
    }
    assert exploration_lines(record) == [
        "  search: 20 unsolved tasks, 75 branches, 2 tasks solved",
        "    chain: L1 2/20 (1,500 tokens), L2 1/55 +10 relabelled (2,900 tokens)",
        "    policy: L2 1/71 (3,800 tokens)",
    ]
    assert exploration_lines({"branches": 0}) == []
