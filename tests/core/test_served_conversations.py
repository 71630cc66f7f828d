from dataclasses import replace

import pytest

from ratchet.core.served import SERVED_KEY, is_served
from ratchet.core.task import TaskSpec, make_task


def test_only_a_task_keyed_as_a_recorded_conversation_is_served():
    task = make_task("calc", TaskSpec("add 2 and 3", {"a": 2, "b": 3}), difficulty=1)
    assert not is_served(task)
    assert is_served(replace(task, problem=f"{SERVED_KEY}conversation-1"))


def test_the_moved_names_still_import_from_their_old_modules():
    from ratchet.core import served, verdict
    from ratchet.envs.check import FORGED_CLAIM
    from ratchet.serve.recorder import SERVED_ENV

    with pytest.warns(DeprecationWarning, match="ratchet.serve.conversations.is_served"):
        from ratchet.serve.memory import is_served as old_is_served

    assert old_is_served is served.is_served
    assert SERVED_ENV == served.SERVED_ENV
    assert FORGED_CLAIM == verdict.FORGED_CLAIM
