import html as html_text
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

import ratchet.envs.calc
from fakes import learning_model
from ratchet.core.agent import Agent
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.engine.store import Store, StoreError
from ratchet.improve.config import ImproveConfig
from ratchet.improve.loop import improve
from ratchet.report import ReportError, trajectory_page, write_report
from ratchet.report.data import attribution, lever_gains, load_improve
from ratchet.report.html import duration

TESTS_DIR = Path(__file__).resolve().parents[1]
ARTIFACTS = TESTS_DIR.parent / "test-artifacts"
URL_ATTRIBUTE = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)


def make_run(out: Path, skilled: float = 0.9, unskilled: float = 0.1) -> Path:
    config = ImproveConfig(
        env="calc",
        model="fake",
        levers=("exemplars",),
        rounds=2,
        train_tasks=16,
        probe_tasks=20,
        test_tasks=20,
        max_difficulty=2,
    )
    improve(
        config,
        ratchet.envs.calc.env,
        out,
        backends=lambda agent, directory: learning_model(skilled, unskilled),
        log=lambda line: None,
    )
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = make_run(tmp_path_factory.mktemp("learning") / "run")
    write_report(out)
    return out


def index_of(run_dir: Path) -> str:
    return (run_dir / "report" / "index.html").read_text()


def headline_of(html: str) -> str:
    match = re.search(r"<h1>(.*?)</h1>", html, re.DOTALL)
    assert match is not None
    return match.group(1)


def test_headline_states_base_final_gain_and_accepted_versions(run_dir: Path) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    base, final = summary["base"]["pass@1"], summary["final"]["pass@1"]
    assert final > base  # the learning model gets much better with demonstrations
    points = round((final - base) * 100)
    headline = headline_of(index_of(run_dir))
    assert headline.startswith(f"calc: pass@1 {base:.2f} → {final:.2f} ({points:+d} points)")
    assert f"on {summary['base']['n']} held-out test tasks" in headline
    assert f"accepted: {summary['final_version']} (exemplars)" in headline


def test_report_has_inline_charts_and_gate_and_cost_numbers(run_dir: Path) -> None:
    html = index_of(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    # headline, learning curve, attribution waterfall, family/difficulty breakdown
    assert html.count("<svg") == 4
    assert "<?xml" not in html and "<!DOCTYPE svg" not in html
    for record in summary["rounds"]:
        for candidate in record["candidates"]:
            assert html_text.escape(candidate["reason"]) in html
    assert f"{summary['tokens']:,}" in html
    for record in summary["rounds"]:  # where each round's time went
        assert f"practice {duration(record['seconds_by_phase']['practice'])}, exemplars" in html
    assert "exemplars</b> 100%" in html  # the only lever accounts for the whole gain


def test_report_shows_each_rounds_search_and_its_strategies(run_dir: Path) -> None:
    html = index_of(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "<h2>Exploration</h2>" in html
    for record in summary["rounds"]:
        explored = record["exploration"]
        for name, levels in explored["strategies"].items():
            for branches, passed, _, relabelled in levels.values():
                assert f"<td>{name}</td>" in html and f"{passed} / {branches}" in html
                assert f'{passed} / {branches}</td><td class="num">{relabelled}</td>' in html


def test_attribution_table_gives_each_lever_its_accepted_gains(run_dir: Path) -> None:
    data = load_improve(run_dir)
    (gain,) = lever_gains(data, attribution(data))
    assert gain.lever == "exemplars" and gain.accepted >= 1 and gain.proposed >= gain.accepted
    assert gain.test_gain == pytest.approx(data.final["pass@1"] - data.base["pass@1"])
    html = index_of(run_dir)
    section = html[html.index("Which lever did it") : html.index("Every gate decision")]
    assert "<th>lever</th>" in section and ">test gain</th>" in section
    assert f"{round(gain.test_gain * 100):+d} points" in section


def test_flip_table_matches_the_stored_test_episodes(run_dir: Path) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    with Store(run_dir) as store:
        base = {t.task.id: t.passed for _, t in store.trajectories(agent="base", split="test")}
        final = {
            t.task.id: t.passed
            for _, t in store.trajectories(agent=summary["final_version"], split="test")
        }
    fixed = sum(final[task] and not passed for task, passed in base.items())
    broken = sum(passed and not final[task] for task, passed in base.items())
    html = index_of(run_dir)
    assert f"fail → pass ({fixed})" in html
    assert f"pass → fail ({broken})" in html
    flip_section = html[html.index("Flipped test tasks") : html.index("<h2>Cost")]
    assert flip_section.count('href="trajectories/') == 2 * (fixed + broken)


def test_links_resolve_and_only_linked_trajectories_get_pages(run_dir: Path) -> None:
    report = run_dir / "report"
    targets = {t for t in URL_ATTRIBUTE.findall(index_of(run_dir)) if t[:1] != "#"} - {"data:,"}
    for target in targets:
        assert (report / target).is_file(), target
    pages = {f"trajectories/{p.name}" for p in (report / "trajectories").iterdir()}
    assert pages == {t for t in targets if t.startswith("trajectories/")}
    with Store(run_dir) as store:
        summary = json.loads((run_dir / "summary.json").read_text())
        wanted = {
            i
            for agent in ("base", summary["final_version"])
            for i, _ in store.trajectories(agent=agent, split="test")
        }
    assert pages == {f"trajectories/{i}.html" for i in wanted}


def test_no_page_points_outside_the_report(run_dir: Path) -> None:
    for file in (run_dir / "report").rglob("*.html"):
        text = file.read_text()
        for target in URL_ATTRIBUTE.findall(text):
            assert not re.match(r"^(?:[a-z][a-z0-9+.-]*:|//)", target, re.I) or target == "data:,"
        assert not re.search(r"url\((?!#)", text)  # only in-page references (SVG clip paths)
        assert "@import" not in text and "<script" not in text


def test_trajectory_page_shows_turns_memory_verdict_and_escapes_text(run_dir: Path) -> None:
    env = ratchet.envs.calc.env
    task = env.tasks("test", 1, seed=3)[0]
    trajectory = replay(
        env, task, [ToolCall("no_such_tool", {"x": 1}), ToolCall("finish", {"answer": "7"})]
    )
    trajectory = replace(
        trajectory,
        task=replace(task, instruction="Compute <b>1 + 1</b>."),
        metadata={"exemplars": ["Compute 2 + 2."]},
    )
    html = trajectory_page(7, trajectory, agent=None)
    assert "Compute &lt;b&gt;1 + 1&lt;/b&gt;." in html and "<b>1 + 1</b>" not in html
    assert "no_such_tool" in html and "&quot;x&quot;: 1" in html
    assert 'class="turn error"' in html and 'class="obs-error"' in html
    assert "Compute 2 + 2." in html
    assert trajectory.verdict is not None and trajectory.verdict.feedback in html
    assert "Verifier: failed" in html


def test_trajectory_page_of_the_final_agent_lists_its_demonstrations(run_dir: Path) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    with Store(run_dir) as store:
        trajectory_id, trajectory = store.trajectories(
            agent=summary["final_version"], split="test", limit=1
        )[0]
    html = (run_dir / "report" / "trajectories" / f"{trajectory_id}.html").read_text()
    assert trajectory.metadata["exemplars"]
    for instruction in trajectory.metadata["exemplars"]:
        assert instruction.replace("'", "&#x27;") in html
    assert f"played by <b>{summary['final_version']}</b>" in html


def test_a_run_where_nothing_is_accepted_says_so(tmp_path: Path) -> None:
    out = make_run(tmp_path / "flat", skilled=0.1, unskilled=0.1)
    html = write_report(out).read_text()
    assert "no candidate passed the gate, so the base agent stays" in headline_of(html)
    assert "No candidate was accepted" in html


def test_eval_only_directory_shows_metrics_and_trajectories(tmp_path: Path) -> None:
    env = ratchet.envs.calc.env
    tasks = env.tasks("test", 4, seed=0)
    with Store(tmp_path) as store:
        run_id = store.start_run("eval", {"env": "calc", "k": 1})
        for task in tasks:
            store.add_trajectory(
                run_id, replay(env, task, env.oracle(task), Agent(version="oracle"))
            )
        store.finish_run(run_id)
    html = write_report(tmp_path).read_text()
    assert "oracle pass@1 1.00" in headline_of(html)
    assert html.count("<svg") == 1
    links = [t for t in URL_ATTRIBUTE.findall(html) if t.startswith("trajectories/")]
    assert len(links) == len(tasks)
    for target in links:
        assert (tmp_path / "report" / target).is_file()


def test_directories_that_are_not_finished_runs_get_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match=r"neither summary\.json nor ratchet\.db"):
        write_report(tmp_path)
    with Store(tmp_path) as store:
        store.start_run("improve", {"env": "calc"})
    with pytest.raises(ReportError, match="has not finished"):
        write_report(tmp_path)
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(ReportError, match="not a ratchet run summary"):
        write_report(tmp_path)


def test_an_empty_database_file_is_refused_and_left_empty(tmp_path: Path) -> None:
    (tmp_path / "ratchet.db").touch()
    with pytest.raises(StoreError, match="holds no ratchet store"):
        write_report(tmp_path)
    (tmp_path / "summary.json").write_text(
        json.dumps({k: 1 for k in ("env", "base", "final", "final_version", "rounds", "run_id")})
    )
    with pytest.raises(StoreError, match="holds no ratchet store"):
        write_report(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ratchet.db", "summary.json"]
    assert (tmp_path / "ratchet.db").stat().st_size == 0


@pytest.mark.slow
def test_report_renders_in_headless_chromium_without_console_errors(
    run_dir: Path, tmp_path: Path
) -> None:
    from headless import Chromium, find_chromium

    executable = find_chromium()
    if executable is None:
        pytest.skip("Chromium is not installed (apt-get install -y chromium); browser test skipped")
    index = run_dir / "report" / "index.html"
    probe = (
        "JSON.stringify({headline: document.querySelector('h1').textContent,"
        " charts: Array.from(document.querySelectorAll('figure svg'))"
        ".map(s => s.getBoundingClientRect().width),"
        " width: document.documentElement.scrollWidth})"
    )
    broken = tmp_path / "broken.html"
    broken.write_text("<h1>x</h1><script>console.error('deliberate')</script>")
    with Chromium(executable, tmp_path / "profile") as browser:
        # The detector itself must see a console error, or a clean report would prove nothing.
        assert any("deliberate" in e for e in browser.load(broken.as_uri()).console_errors)
        page = browser.load(index.as_uri(), probe)
        viewer = next((run_dir / "report" / "trajectories").glob("*.html"))
        trajectory = browser.load(viewer.as_uri(), "document.querySelector('h1').textContent")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "report.png").write_bytes(page.screenshot)
    (ARTIFACTS / "trajectory.png").write_bytes(trajectory.screenshot)
    facts = json.loads(page.value)
    assert facts["headline"] == re.sub(r"<[^>]+>", "", headline_of(index.read_text()))
    assert facts["headline"].startswith("calc: pass@1")
    assert len(facts["charts"]) == 4 and all(width > 200 for width in facts["charts"])
    assert facts["width"] <= 1280  # nothing overflows sideways
    assert page.console_errors == [] and trajectory.console_errors == []
    assert all(url.startswith("file:") for url in page.requests + trajectory.requests)
    assert page.screenshot.startswith(b"\x89PNG") and trajectory.value


def test_a_search_record_made_before_relabels_were_counted_still_renders(
    run_dir: Path, tmp_path: Path
) -> None:
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    summary = json.loads((old / "summary.json").read_text())
    summary["rounds"][0]["exploration"]["strategies"] = {"chain": {"2": [55, 1, 2900]}}
    (old / "summary.json").write_text(json.dumps(summary))
    write_report(old)
    assert '<td>chain</td><td>2</td><td class="num">1 / 55</td><td class="num">0</td>' in (
        index_of(old)
    )
