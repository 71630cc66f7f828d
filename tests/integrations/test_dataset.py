import pytest

from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.engine.harness import replay
from ratchet.envs.check import check_env
from ratchet.integrations.dataset import dataset_env, exact_match, numeric_match


def rows(start, stop):
    return [
        {"question": f"What is {a} plus {a + 1}?", "answer": f"{a} + {a + 1} = #### {2 * a + 1}"}
        for a in range(start, stop)
    ]


def last_number(row):
    return row["answer"].split("####")[-1]


@pytest.mark.parametrize(
    ("answer", "expected", "right"),
    [
        ("42", "42", True),
        ("The answer is $1,000.", "1000", True),
        ("42.0", "42", True),
        ("41, 42 or 43", "42", False),
        ("942", "42", False),
        ("nan", "42", False),
        ("", "42", False),
        ("inf", "inf", False),
    ],
)
def test_numeric_match_wants_exactly_one_right_number(answer, expected, right):
    assert numeric_match(answer, expected) is right


def test_exact_match_ignores_case_spacing_quotes_and_a_final_period():
    assert exact_match("  'Paris.' ", "paris")
    assert not exact_match("Paris or Lyon", "Paris")


def test_a_hugging_face_dataset_dict_keeps_its_own_splits_and_passes_check():
    datasets = pytest.importorskip("datasets")
    data = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(rows(0, 40)),
            "validation": datasets.Dataset.from_list(rows(40, 52)),
            "test": datasets.Dataset.from_list(rows(52, 64)),
        }
    )
    env = dataset_env(data, name="sums", match="numeric", expected=last_number)
    probe = env.tasks("probe", 12)
    assert {t.params["question"] for t in probe} == {r["question"] for r in rows(40, 52)}
    assert env.tasks("test", 1)[0].params["answer"] in {str(2 * a + 1) for a in range(52, 64)}
    with pytest.raises(ValueError, match="probe split holds 12 problems, fewer than the 13"):
        env.tasks("probe", 13)
    report = check_env(env, n=10, split_draws=40)
    assert report.passed, [r for r in report.results if not r.passed]


def test_rows_without_splits_are_split_by_problem_and_a_custom_match_scores():
    def half_credit(submitted, expected):
        return 1.0 if submitted == expected else 0.5 if submitted.startswith(expected[0]) else 0.0

    env = dataset_env(rows(0, 300), name="flat", match=half_credit, expected=last_number)
    sizes = {split: len(env.tasks(split, 20)) for split in ("train", "probe", "test")}
    assert sizes == {"train": 20, "probe": 20, "test": 20}
    task = env.tasks("test", 1)[0]
    right = task.params["answer"]
    assert replay(env, task, [ToolCall("finish", {"answer": right})]).passed
    half = replay(env, task, [ToolCall("finish", {"answer": right[0] + "x"})])
    assert (half.score, half.passed) == (0.5, False)


def test_tools_are_offered_and_bad_columns_and_splits_are_clear_errors():
    def add(a: float, b: float) -> float:
        """Add two numbers.

        Args:
            a: First number.
            b: Second number.
        """
        return a + b

    env = dataset_env(rows(0, 50), name="tooled", tools=[add], expected=last_number)
    first = env.session(env.tasks("train", 1)[0]).reset()
    assert [t["function"]["name"] for t in first.tools] == ["add", "finish"]
    with pytest.raises(ValueError, match="row 0 of split 'train' has no 'query' column"):
        dataset_env(rows(0, 3), name="bad", question="query")
    with pytest.raises(ValueError, match="unknown split 'extra'"):
        dataset_env({"train": rows(0, 3), "extra": rows(3, 4)}, name="bad")
    with pytest.raises(ValueError, match="match must be"):
        dataset_env(rows(0, 3), name="bad", match="fuzzy")


def test_a_verdict_from_the_match_function_is_kept():
    env = dataset_env(
        rows(0, 50), name="v", match=lambda s, e: Verdict(0.3, False, "close"), expected=last_number
    )
    task = env.tasks("train", 1)[0]
    verdict = replay(env, task, env.oracle(task)).verdict
    assert (verdict.score, verdict.feedback) == (0.3, "close")
