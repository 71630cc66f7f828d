"""An env from a dataset: word problems with a question and an answer column, in its own splits.

The rows here are made in code (a GSM8K-like format: the answer column holds a worked solution
ending in ``#### <number>``) and wrapped in a Hugging Face ``datasets.DatasetDict`` when
``datasets`` is installed; a dict of lists of rows works the same. With a dataset from the hub
it is one line: ``dataset_env(load_dataset("openai/gsm8k", "main"), name="gsm8k", ...)``.

    ratchet check examples/dataset_env.py:env -n 10
    ratchet eval examples/dataset_env.py:env --model local -n 4
"""

import random

from ratchet.integrations.dataset import dataset_env

NAMES = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay"]
THINGS = ["apples", "stamps", "marbles", "books", "shells"]


def row(rng: random.Random) -> dict[str, str]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    have, more, gave = rng.randint(3, 40), rng.randint(2, 30), rng.randint(1, 10)
    total = have + more - gave
    return {
        "question": f"{name} has {have} {thing}, buys {more} more and gives {gave} away. "
        f"How many {thing} does {name} have now?",
        "answer": f"{have} + {more} - {gave} = {total}\n#### {total}",
    }


def make_rows(seed: int, count: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    return [row(rng) for _ in range(count)]


SPLITS = {"train": make_rows(1, 60), "validation": make_rows(2, 16), "test": make_rows(3, 16)}

try:
    import datasets

    data = datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in SPLITS.items()})
except ImportError:  # the rows work as they are
    data = SPLITS

env = dataset_env(
    data,
    name="example/word-problems",
    description="Word problems from a dataset; the answer is one number.",
    match="numeric",
    expected=lambda r: r["answer"].split("####")[-1],
)
