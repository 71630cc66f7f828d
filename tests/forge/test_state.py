import sqlite3

import pytest

from ratchet.forge.state import cells, changed, describe_change, differences, scalars, sqlite_state


def test_cells_flatten_nested_state_and_keep_empty_rows():
    flat = cells({"books": {"B1": {"shelf": "poetry", "tags": ["a", "b"]}}, "loans": {}, "n": 2})
    assert flat == {
        "books/B1/shelf": "poetry",
        "books/B1/tags/0": "a",
        "books/B1/tags/1": "b",
        "loans": {},
        "n": 2,
    }
    assert cells({"a/b": 1}) == {"a~1b": 1}


def test_cells_refuse_what_is_not_a_state():
    with pytest.raises(TypeError, match="x is a set"):
        cells({"x": {1, 2}})
    with pytest.raises(TypeError, match="not finite"):
        cells({"x": float("nan")})


def test_changed_sees_values_types_and_rows_added_or_removed():
    before = cells({"t": {"1": {"v": 1}, "2": {"v": 2}}})
    after = cells({"t": {"1": {"v": True}, "3": {"v": 2}}})
    assert changed(before, after) == {"t/1/v", "t/2/v", "t/3/v"}
    assert changed(before, before) == set()


def test_differences_name_each_cell_and_stop_at_the_limit():
    expected = {"a": 1, "b": "x", "c": 3}
    actual = {"a": 2, "b": "x", "d": 4}
    assert differences(expected, actual) == [
        "a is 2, expected 1",
        "c is missing, expected 3",
        "d is 4, expected no such value",
    ]
    assert differences(expected, actual, limit=1) == ["a is 2, expected 1", "... and 2 more"]
    assert describe_change({"s": "in"}, {"s": "out"}) == "s: 'in' -> 'out'"


def test_scalars_hold_values_and_path_parts_or_only_row_keys():
    state = cells({"books": {"B07": {"shelf": "poetry"}}})
    assert scalars(state, ends=False) == {"B07", "poetry"}
    assert scalars(state) == {"books", "B07", "shelf", "poetry"}


def test_sqlite_state_keys_rows_by_primary_key_or_rowid():
    conn = sqlite3.connect(":memory:")
    conn.executescript(
        "CREATE TABLE books (id TEXT PRIMARY KEY, shelf TEXT);"
        "CREATE TABLE log (line TEXT);"
        "INSERT INTO books VALUES ('B1', 'poetry');"
        "INSERT INTO log VALUES ('lent');"
    )
    assert sqlite_state(conn) == {
        "books": {"B1": {"id": "B1", "shelf": "poetry"}},
        "log": {"1": {"line": "lent"}},
    }
