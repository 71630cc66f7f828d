import json
from typing import Annotated, Any

import jsonschema
import pytest
from pydantic import Field

from ratchet.core.tool import tools_from
from ratchet.engine.models.bounds import MIN_TEXT, NUMBER_TOKENS, CapTooSmall, bound_arguments
from ratchet.engine.models.constrain import tool_call_grammar, tool_call_schema
from ratchet.envs.registry import load_env_reference


def chars(text: str) -> int:
    """The worst case of a byte-level tokenizer on ASCII text: one token per character."""
    return len(text)


def longest(schema: dict[str, Any]) -> Any:
    """The longest value a bounded schema allows (numbers at their reserved digits)."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return max(schema["enum"], key=lambda v: len(json.dumps(v)))
    if "anyOf" in schema:
        return max((longest(o) for o in schema["anyOf"]), key=lambda v: len(json.dumps(v)))
    kind = schema.get("type")
    kind = next(k for k in kind if k != "null") if isinstance(kind, list) else kind
    if kind == "string":
        return "x" * schema["maxLength"]
    if kind in ("number", "integer"):
        return int("9" * NUMBER_TOKENS)
    if kind == "boolean":
        return False
    if kind == "array":
        return [longest(schema["items"])] * schema["maxItems"]
    if kind == "object":
        return {key: longest(p) for key, p in schema.get("properties", {}).items()}
    raise AssertionError(f"unbounded schema {schema}")


def env_tools(name: str) -> tuple[dict[str, Any], ...]:
    env = load_env_reference(name)
    return env.session(env.tasks("train", 1, seed=0, difficulty=1)[0]).reset().tools


@pytest.mark.filterwarnings("ignore::ratchet.engine.models.bounds.CapTooSmall")
@pytest.mark.parametrize("env", ["calc", "shop", "files", "grid", "code"])
@pytest.mark.parametrize("cap", [128, 256])
def test_the_longest_call_the_bounded_schema_allows_fits_the_cap(env: str, cap: int) -> None:
    for option in tool_call_schema(env_tools(env), cap, chars).get("anyOf", []):
        name = option["properties"]["name"]["const"]
        arguments = option["properties"]["arguments"]
        call = {"name": name, "arguments": longest(arguments)}
        if f'"maxLength": {MIN_TEXT}' in json.dumps(arguments):
            continue  # the cap cannot hold this call's fixed text and MIN_TEXT per string
        assert chars(json.dumps(call)) + 1 <= cap, (env, name)  # + end-of-turn


def note(
    title: Annotated[str, Field(max_length=20)],
    body: str,
    tags: list[str],
    mood: str = "calm",
    stars: int = 3,
) -> str:
    """Write a note.

    Args:
        title: Short title.
        body: The text.
        tags: Labels.
        mood: How it feels.
        stars: Rating.
    """
    return title


NOTE = tools_from(note)[0].schema()


def test_unbounded_strings_and_arrays_get_bounds_and_authors_bounds_are_kept() -> None:
    parameters = NOTE["function"]["parameters"]
    bounded = bound_arguments("note", parameters, 200, chars)
    props = bounded["properties"]
    assert props["title"]["maxLength"] == 20
    assert props["body"]["maxLength"] == props["mood"]["maxLength"] > MIN_TEXT
    assert props["tags"]["maxItems"] >= 1 and props["tags"]["items"]["maxLength"] >= MIN_TEXT
    assert "maxLength" not in parameters["properties"]["body"]  # the input is not modified
    call = {"name": "note", "arguments": longest(bounded)}
    assert chars(json.dumps(call)) + 1 <= 200


def test_a_cap_too_small_for_the_call_still_leaves_usable_strings_and_warns() -> None:
    with pytest.warns(CapTooSmall, match="a call of note needs about .* more than the reply cap"):
        bounded = bound_arguments("note", NOTE["function"]["parameters"], 16, chars)
    assert bounded["properties"]["body"]["maxLength"] == MIN_TEXT


def test_enums_constants_and_argument_free_tools_are_left_alone() -> None:
    closed = {"type": "object", "properties": {"unit": {"type": "string", "enum": ["a", "b"]}}}
    assert bound_arguments("pick", closed, 64, chars) is closed
    free = {"type": "object", "properties": {}}
    assert bound_arguments("look", free, 64, chars) is free


def test_the_grammar_rejects_what_would_overrun_the_cap() -> None:
    tools = env_tools("calc")
    schema = tool_call_schema(tools, 64, chars)
    finish = {"name": "finish", "arguments": {"answer": "x" * 200}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(finish, schema)
    jsonschema.validate({"name": "finish", "arguments": {"answer": "42"}}, schema)
    assert tool_call_grammar(tools, 64, chars) != tool_call_grammar(tools)


@pytest.mark.parametrize(
    "name", ["calc", "grid", "shop", pytest.param("files", marks=pytest.mark.slow)]
)
def test_the_fitted_cap_is_the_smallest_at_which_every_tool_fits_without_warning(name):
    import warnings

    from ratchet.engine.models.bounds import CAPS, fitted_cap, needed_tokens

    env = load_env_reference(name)
    task = env.tasks("train", 1, seed=0, difficulty=2)[0]
    session = env.session(task)
    tools = session.reset().tools
    session.close()
    cap = fitted_cap(tools, chars, CAPS[-1])
    assert cap in CAPS and cap >= max(needed_tokens(t, chars) for t in tools)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CapTooSmall)
        tool_call_schema(tools, cap, chars)  # every call fits its cap
    smaller = [c for c in CAPS if c < cap]
    if smaller:  # some call would not fit the next smaller cap
        assert max(needed_tokens(t, chars) for t in tools) > smaller[-1]
    assert fitted_cap(tools, chars, 40) == 40  # never above the caller's own cap
