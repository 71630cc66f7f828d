import itertools
import random
from dataclasses import replace

from search_fakes import TASKS, eager, roots

from ratchet.core.agent import Agent
from ratchet.core.env import SimpleEnv
from ratchet.core.task import TaskSpec
from ratchet.core.tool import ToolCall
from ratchet.core.verdict import Verdict
from ratchet.engine.models.fake import FakeModel
from ratchet.engine.rollout import rollout
from ratchet.envs.calc import env
from ratchet.improve.explore import SearchConfig, explore
from ratchet.improve.explore.bandit import Yield, rank, tally
from ratchet.improve.explore.strategies import STRATEGIES
from ratchet.improve.hindsight import REPLAY_SAMPLES, episode_key, sources


def player(model, environment=env):
    played = []

    def play(tasks, k, first, steer, label):
        fresh = rollout(
            environment,
            tasks,
            Agent(model="fake"),
            model,
            k=k,
            seed=1,
            first_sample=first,
            steer=steer,
        )
        played.append((label, [(t.task.id, t.sample) for t in fresh]))
        return fresh

    return play, played


DEFAULT = SearchConfig()


def run(model, tasks=TASKS, config=DEFAULT, search=True, history=(), environment=env, **options):
    play, played = player(model, environment)
    temperatures = {t.id: [0.7, 0.9] for t in tasks}
    result = explore(
        tasks,
        2,
        0,
        temperatures,
        play,
        config=config,
        search=search,
        history=list(history),
        max_turns=4,
        seed=0,
        log=lambda line: played.append(("log", line)),
        **options,
    )
    return result, played


def test_search_solves_what_the_samples_did_not_and_stops_there():
    result, played = run(eager())
    record = result.record
    assert record["roots"] == [0, 12]  # one step short on every task
    assert record["searched"] == 6 and record["solved"] == 6
    # Each task stops once solved: fewer waves than branches allowed.
    waves = [label for label, _ in played if label.startswith("train search")]
    assert 0 < len(waves) < SearchConfig().branches_per_task
    samples = {s for label, jobs in played if label != "train" for _, s in jobs}
    assert samples <= {2, 3, 4, 5, 6, 7}
    branched = [t for t in result.episodes if t.sample >= 2]
    counts = [n for levels in record["strategies"].values() for n, *_ in levels.values()]
    assert sum(counts) == len(branched)
    assert all(t.exploration.parent in (0, 1) or t.exploration.parent >= 2 for t in branched)
    assert record["deterministic"]


def test_with_explore_off_only_the_roots_are_played():
    result, played = run(eager(), search=False)
    assert [label for label, _ in played] == ["train"]
    assert result.record["branches"] == 0 and len(result.episodes) == 12


def test_a_task_stops_when_its_token_budget_is_spent():
    result, _ = run(eager(), config=SearchConfig(task_tokens=1))
    assert result.record["branches"] == 0  # the roots alone spent it


def test_a_task_with_no_open_node_is_not_branched():
    def finisher(prompt, rng):
        return '{"name": "finish", "arguments": {"answer": "1"}}'

    result, _ = run(FakeModel(reply=finisher), config=SearchConfig(branches_per_task=3))
    # Only the start can be branched (a finish ends every path), up to max_tried actions.
    assert result.record["branches"] == 6 * 3
    assert all(t.exploration.branch_turn == 0 for t in result.episodes)


def counter_env():
    """An env whose only tool answers with a count that grows across sessions: not
    deterministic, as an env with hidden global state would be."""
    ticks = itertools.count()

    def sample(rng, difficulty):
        return TaskSpec("Tick twice, then finish.", {"n": rng.randrange(10**6)})

    def tools(world):
        def tick() -> str:
            """Count one."""
            return str(next(ticks))

        return [tick]

    return SimpleEnv(
        name="ticks",
        description="A counter.",
        sample=sample,
        build=lambda task: None,
        tools=tools,
        verify=lambda task, world, answer: Verdict.of(False),
        oracle=lambda task: [ToolCall("tick", {}), ToolCall("finish", {"answer": ""})],
        max_difficulty=1,
    )


def test_a_replay_that_meets_another_world_falls_back_to_sampling_once_said():
    ticks = counter_env()
    tasks = ticks.tasks("train", 2, seed=0, difficulty=1)

    def ticker(prompt, rng):
        if any(m["role"] == "tool" for m in prompt.messages):
            return '{"name": "finish", "arguments": {"answer": ""}}'
        return '{"name": "tick", "arguments": {}}'

    result, played = run(
        FakeModel(reply=ticker), tasks, SearchConfig(branches_per_task=3), environment=ticks
    )
    assert not result.record["deterministic"]
    said = [line for label, line in played if label == "log"]
    assert len(said) == 1 and "not deterministic" in said[0]
    later = [t for t in result.episodes if t.sample >= 3]
    assert later and all(t.exploration.parent is None for t in later)  # sampled afresh


def test_the_scheduler_gives_most_branches_to_the_strategy_that_pays():
    paying, idle = STRATEGIES[1], STRATEGIES[2]
    yields = {(paying.name, 2): Yield(20, 10, 2000), (idle.name, 2): Yield(20, 0, 2000)}
    rng = random.Random(0)
    picks = [rank([paying, idle], 2, yields, rng)[0].name for _ in range(200)]
    assert picks.count(paying.name) > 190
    # A level it never played starts from its record elsewhere.
    picks = [rank([paying, idle], 3, yields, rng)[0].name for _ in range(200)]
    assert picks.count(paying.name) > 150
    # Unknown strategies share the budget.
    picks = [rank([paying, idle], 1, {}, rng)[0].name for _ in range(400)]
    assert 120 < picks.count(paying.name) < 280


def test_yields_are_counted_from_branches_only_with_their_resamples():
    (root,) = roots(eager(), TASKS[:1])
    result, _ = run(eager(), TASKS[:1])
    counted = tally(result.episodes)
    branched = [t for t in result.episodes if t.sample >= 2]
    assert sum(y.branches for y in counted.values()) == len(branched)
    assert sum(y.tokens for y in counted.values()) == sum(
        t.completion_tokens + t.exploration.discarded_tokens for t in branched
    )
    assert tally([root]) == {}


def test_a_strategy_with_no_node_of_its_kind_gives_way_to_the_next_of_the_same_draw():
    cheap, paying, plain = STRATEGIES[4], STRATEGIES[2], STRATEGIES[0]
    assert cheap.closes and plain.name == "policy"
    yields = {
        (cheap.name, 2): Yield(20, 0, 200),
        (paying.name, 2): Yield(20, 4, 2000),
        (plain.name, 2): Yield(20, 0, 2000),
    }
    rng = random.Random(1)
    orders = [[s.name for s in rank([plain, paying, cheap], 2, yields, rng)] for _ in range(200)]
    assert all(sorted(order) == sorted([plain.name, paying.name, cheap.name]) for order in orders)
    # Where the cheapest comes first and finds no node, the paying one, not the list's first,
    # takes its place.
    seconds = [order[1] for order in orders if order[0] == cheap.name]
    assert seconds and seconds.count(paying.name) > 0.8 * len(seconds)


def test_the_record_counts_the_branches_hindsight_relabelled_per_strategy():
    def finisher(prompt, rng):
        return '{"name": "finish", "arguments": {"answer": "1"}}'

    result, _ = run(FakeModel(reply=finisher), config=SearchConfig(branches_per_task=3))
    branched = [t for t in result.episodes if t.sample >= 2]
    assert all(levels["2"][3] == 0 for levels in result.record["strategies"].values())
    taught = {episode_key(t) for t in branched[::2]} | {episode_key(result.episodes[0])}
    counted = result.with_relabels(taught)
    assert sum(levels["2"][3] for levels in counted.record["strategies"].values()) == len(
        branched[::2]
    )  # the root among them is not a branch
    assert counted.episodes == result.episodes
    assert {k: v for k, v in counted.record.items() if k != "strategies"} == {
        k: v for k, v in result.record.items() if k != "strategies"
    }


def test_a_stored_relabel_is_counted_for_the_branch_it_came_from_at_its_level_or_above():
    result, _ = run(eager(), TASKS[:1])
    branch = next(t for t in result.episodes if t.sample >= 2 and t.passed)
    failed = replace(branch, verdict=Verdict.of(False))
    above = env.tasks("train", 1, seed=8, difficulty=3)[0]
    below = env.tasks("train", 1, seed=8, difficulty=1)[0]
    relabels = [
        replace(
            failed,
            task=task,
            verdict=Verdict.of(True),
            sample=REPLAY_SAMPLES + failed.sample,
            metadata={"hindsight": True, "source_task": failed.task.id},
            exploration=None,
        )
        for task in (above, below)
    ]
    history = [failed, *relabels]
    (counted,) = tally(history, sources(history)).values()
    assert (counted.branches, counted.passed, counted.relabelled) == (1, 0, 1)
    # A replay at a lower level than its source says nothing of the source's level.
    (counted,) = tally(history[::2], sources(history[::2])).values()
    assert (counted.branches, counted.passed, counted.relabelled) == (1, 0, 0)


def test_the_scheduler_ranks_by_passes_not_by_relabels():
    relabelled, passing = STRATEGIES[1], STRATEGIES[2]
    yields = {
        (relabelled.name, 2): Yield(20, 0, 2000, relabelled=15),
        (passing.name, 2): Yield(20, 4, 2000),
    }
    rng = random.Random(0)
    picks = [rank([relabelled, passing], 2, yields, rng)[0].name for _ in range(200)]
    assert picks.count(passing.name) > 180
