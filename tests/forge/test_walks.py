import random

from forge.jars import jars
from ratchet.core.tool import Tool, ToolCall
from ratchet.forge.state import cells
from ratchet.forge.walks import Draw, Ran, Runner, answerable, judge_walk, normalise, problem_key


def _ran(before: dict, after: dict, name: str = "t") -> Ran:
    return Ran(ToolCall(name), "ok", None, cells(before), cells(after))


def test_a_walk_that_ends_where_it_began_changed_nothing():
    start = {"a": 0}
    steps = [_ran(start, {"a": 1}), _ran({"a": 1}, start)]
    assert judge_walk(steps, cells(start)) == "changed nothing"


def test_a_walk_whose_call_is_undone_later_undid_itself():
    start = {"a": 0, "b": 0}
    steps = [_ran(start, {"a": 1, "b": 0}), _ran({"a": 1, "b": 0}, {"a": 2, "b": 1})]
    assert judge_walk(steps, cells(start)) == "undid itself"
    lasting = [_ran(start, {"a": 1, "b": 0}), _ran({"a": 1, "b": 0}, {"a": 1, "b": 1})]
    assert judge_walk(lasting, cells(start)) is None


def test_runner_records_results_errors_and_changes():
    with Runner(jars, 0) as runner:
        full = next(j for j, v in runner.world.items() if v["full"])
        ran = runner.run(ToolCall("empty", {"jar_id": full}))
        assert ran.error is None and ran.changed == {f"{full}/full"}
        again = runner.run(ToolCall("empty", {"jar_id": full}))
        assert again.error == f"{full} is already empty" and not again.changed
        bad = runner.run(ToolCall("paint", {"jar_id": "J1", "colour": "mauve"}))
        assert bad.error is not None and "colour" in bad.error


def test_commuting_calls_normalise_to_one_order_and_one_key():
    with Runner(jars, 1) as runner:
        colours = {j: v["colour"] for j, v in runner.world.items()}
    first = ToolCall("paint", {"colour": _other(colours["J2"]), "jar_id": "J2"})
    second = ToolCall("paint", {"colour": _other(colours["J1"]), "jar_id": "J1"})
    keys = set()
    for order in ([first, second], [second, first]):
        with Runner(jars, 1) as runner:
            steps = [runner.run(call) for call in order]
        calls = normalise(jars, 1, steps)
        keys.add(
            problem_key(
                {"world": 1, "calls": [{"name": c.name, "arguments": c.arguments} for c in calls]}
            )
        )
    assert len(keys) == 1


def _other(colour: str) -> str:
    return next(c for c in ("red", "green", "blue") if c != colour)


def test_draw_takes_values_enums_and_bounded_numbers():
    def pick(count: int, colour: str, flag: bool) -> str:
        """Pick.

        Args:
            count: How many.
            colour: A colour.
            flag: A flag.
        """
        return ""

    tool = Tool.from_function(pick)
    tool = Tool.from_schema(
        "pick",
        "Pick.",
        {
            "type": "object",
            "properties": {
                "count": {"type": "integer", "minimum": 3, "maximum": 4},
                "colour": {"enum": ["red", "blue"]},
                "jar_id": {"type": "string"},
            },
            "required": ["count", "colour", "jar_id"],
        },
        tool.fn,
    )
    draw = Draw(jars, {}, cells({"J1": {"colour": "red"}}))
    rng = random.Random(0)
    for _ in range(20):
        drawn = draw.arguments(rng, tool)
        assert drawn["count"] in (3, 4) and drawn["colour"] in ("red", "blue")
        assert drawn["jar_id"] in {f"J{i}" for i in range(1, 7)}


def test_answerable_results_are_short_single_values():
    assert answerable("on loan") and answerable("3")
    assert not answerable("") and not answerable('["B1"]') and not answerable("a\nb")
    assert not answerable("x" * 61)
