import pytest

from ratchet.core.serialise import from_dict, to_dict
from ratchet.core.verdict import Verdict


def test_score_must_be_in_unit_interval():
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        Verdict(1.5, True)


def test_round_trip():
    verdict = Verdict(0.5, False, "half the rows", {"rows": 0.5})
    assert from_dict(Verdict, to_dict(verdict)) == verdict
    assert Verdict.of(True).score == 1.0
