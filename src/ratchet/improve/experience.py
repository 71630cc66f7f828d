"""Experience from outside the run: verified episodes another store holds (``--experience``).

Two kinds are taken, both as training experience only:

- recorded traffic (``ratchet serve``) that has a verdict from ``POST /v1/feedback``. A
  conversation has no problem key in the env's splits, so it can never be a probe or test
  task: it joins as a train episode of family ``served`` (problem key ``served:<id>``) and of
  the run's env, so levers learn from it; the curriculum never replays it (there is no world
  to replay it in);
- verified episodes of the run's env whose problem key the env's splits put in ``train``
  (from ``ratchet run`` or another improvement run); episodes of probe or test problems are
  left out whatever split they were stored under.

Unverified traffic (no feedback yet) is left out: only the verifier or the application's own
verdict makes an episode experience.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ratchet.core.served import SERVED_ENV, is_served
from ratchet.core.task import split_of
from ratchet.core.trajectory import Trajectory
from ratchet.engine.store import DB_NAME, Store


def verified_experience(store_dir: Path, env: str) -> list[Trajectory]:
    """The verified training episodes ``store_dir`` holds for env ``env``, oldest first.

    Raises:
        ValueError: If ``store_dir`` holds no store.
    """
    if not (store_dir / DB_NAME).is_file():
        raise ValueError(f"--experience {store_dir} holds no store ({DB_NAME} is missing)")
    with Store(store_dir) as store:
        stored = store.trajectories(split="train")
    kept = []
    for _, trajectory in stored:
        task = trajectory.task
        if trajectory.verdict is None:
            continue
        if is_served(task):
            if task.env in (env, SERVED_ENV):
                kept.append(replace(trajectory, task=replace(task, env=env)))
        elif task.problem and task.env == env and split_of(task.problem) == "train":
            kept.append(trajectory)
    return kept
