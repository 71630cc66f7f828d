"""The integrations' security battery: each attack found by red-teaming, as a regression test."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
from ratchet.integrations.harbor import harbor_env, read_task
from ratchet.sandbox import landlock_abi

HELLO = Path(__file__).parent / "harbor_tasks" / "hello-file"
needs_sandbox = pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")


def _harbor_task(root: Path, test_sh: str, toml: str = "") -> Path:
    task = root / "task"
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("Write done.txt holding the word done.")
    (task / "tests" / "test.sh").write_text(test_sh)
    (task / "task.toml").write_text(toml)
    return task


def _played(task_dir: Path, plant: str):
    env = harbor_env(task_dir, name="attacked", splits={"test": [task_dir.name]})
    task = env.tasks("test", 1)[0]
    return replay(env, task, [ToolCall("bash", {"command": plant}), ToolCall("finish", {})])


# Planted code writes a passing reward wherever the verifier's logs folder is, then ends the
# interpreter before the real checks run.
FORGE = (
    "import glob, os\n"
    "for logs in glob.glob(os.path.expanduser('~') + '/../**/logs/verifier', recursive=True)"
    " + glob.glob(os.getcwd() + '/.verifier-*/logs/verifier'):\n"
    "    open(logs + '/reward.json', 'w').write('{\"reward\": 1, \"mentions\": 1}')\n"
    "os._exit(0)\n"
)
USER_SITE = "$(python3 -c 'import site; print(site.getusersitepackages())')"


@needs_sandbox
def test_a_planted_usercustomize_does_not_run_in_the_harbor_verifier():
    plant = f"mkdir -p {USER_SITE} && cat > {USER_SITE}/usercustomize.py <<'EOF'\n{FORGE}EOF"
    forged = _played(HELLO, plant)
    assert forged.steps[0].observation.error is None
    assert not forged.passed, forged.verdict


@needs_sandbox
def test_a_planted_pth_file_does_not_run_in_the_harbor_verifier():
    # site runs a .pth line that starts with "import"; the folder is on sys.path by then.
    plant = (
        f"mkdir -p {USER_SITE} && cat > {USER_SITE}/forge.py <<'EOF'\n{FORGE}EOF\n"
        f"echo 'import forge' > {USER_SITE}/zz.pth"
    )
    forged = _played(HELLO, plant)
    assert not forged.passed, forged.verdict


@needs_sandbox
def test_a_planted_gitconfig_does_not_hook_the_harbor_verifier_s_git(tmp_path):
    # The tests commit in a scratch repository (skipping /etc/gitconfig, which the sandbox
    # cannot read); a ~/.gitconfig planted by the agent would make git run the agent's hook
    # (core.hooksPath) inside the verifier, and its aliases apply too.
    test_sh = (
        "export GIT_CONFIG_NOSYSTEM=1\necho 0 > /logs/verifier/reward.txt\n"
        'scratch=$(mktemp -d) && cd "$scratch" && git init -q . && '
        "git -c user.email=v@example.com -c user.name=v commit -q --allow-empty -m check\n"
    )
    hook = (
        '#!/bin/sh\nfor f in "$OLDPWD"/.verifier-*/logs/verifier; do echo 1 > $f/reward.txt; done\n'
    )
    plant = (
        "mkdir -p hooks && cat > hooks/pre-commit <<'EOF'\n" + hook + "EOF\n"
        "chmod +x hooks/pre-commit && printf '[core]\\n\\thooksPath = %s/hooks\\n"
        '[alias]\\n\\tci = commit\\n\' "$(pwd)" > .gitconfig'
    )
    task_dir = _harbor_task(tmp_path, test_sh)
    forged = _played(task_dir, plant)
    assert forged.verdict.feedback == "reward 0", forged.verdict


@needs_sandbox
def test_the_harbor_verifier_gets_a_fresh_home_and_temporary_folder(tmp_path):
    test_sh = (
        'ls -A "$HOME" "$TMPDIR" > /logs/verifier/seen.txt; '
        'echo x > "$HOME/written" && echo x > "$TMPDIR/written" && '
        '[ "$PYTHONNOUSERSITE" = 1 ] && [ ! -e "$HOME/.gitconfig" ] && '
        '[ -z "$(ls -A "$HOME" | grep -v written)" ] && echo 1 > /logs/verifier/reward.txt\n'
    )
    task_dir = _harbor_task(tmp_path, test_sh)
    played = _played(task_dir, "touch .gitconfig .bashrc && mkdir -p .local && ls -A")
    assert played.passed, played.verdict


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[verifier]\ntimeout_sec = nan\n", r"\[verifier\] timeout_sec must be a positive"),
        ("[agent]\ntimeout_sec = -5\n", r"\[agent\] timeout_sec must be a positive"),
        ('[verifier]\ntimeout_sec = "600"\n', r"\[verifier\] timeout_sec must be a positive"),
        ("[verifier]\ntimeout_sec = inf\n", r"\[verifier\] timeout_sec must be a positive"),
        ("[verifier]\ntimeout_sec = true\n", r"\[verifier\] timeout_sec must be a positive"),
        ("verifier = 3\n", r"\[verifier\] must be a table"),
    ],
)
def test_a_malformed_task_toml_is_refused_when_the_task_loads(tmp_path, toml, message):
    task_dir = _harbor_task(tmp_path, "echo 1 > /logs/verifier/reward.txt\n", toml)
    with pytest.raises(ValueError, match=message):
        read_task(task_dir)
    with pytest.raises(ValueError, match=message):
        harbor_env(task_dir, name="x")


# An MCP server that ignores SIGTERM and the end of its input, with a child of its own in its
# process group; "mute" never answers the start-up handshake at all.
STUBBORN_SERVER = """
import json, os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                          "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
with open(sys.argv[1], "w") as pids:
    pids.write(f"{os.getpid()} {child.pid}")
for line in sys.stdin:
    message = json.loads(line)
    if sys.argv[2] == "mute" or "id" not in message:
        continue
    if message["method"] == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities":
                  {"tools": {}}, "serverInfo": {"name": "stubborn", "version": "1"}}
    else:
        result = {"tools": [{"name": "ping", "inputSchema": {"type": "object"}}]}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
while True:
    time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _stubborn(tmp_path: Path, mode: str):
    from ratchet.integrations.mcp import StdioServer

    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN_SERVER)
    pids = tmp_path / "pids"
    return StdioServer(sys.executable, [str(script), str(pids), mode], grace_s=0.2), pids


# How long a test waits for a process to start, answer or die: only a hang guard, since a
# loaded machine can take many seconds to start Python and import the MCP SDK.
PATIENCE_S = 60


def _pids(path: Path) -> list[int]:
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:  # the server writes them as it starts
        if path.exists() and path.read_text():
            return [int(p) for p in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError("the server never started")


def test_an_mcp_server_that_ignores_sigterm_and_end_of_input_is_reaped_on_close(tmp_path):
    from ratchet.integrations.mcp import MCPClient

    server, pids = _stubborn(tmp_path, "answer")
    client = MCPClient(server, timeout_s=PATIENCE_S)
    assert [t["name"] for t in client.tools] == ["ping"]
    running = _pids(pids)
    client.close()
    assert not any(_alive(pid) for pid in running)


def test_an_mcp_server_that_never_finishes_its_handshake_is_reaped(tmp_path):
    from ratchet.integrations.mcp import MCPClient

    server, pids = _stubborn(tmp_path, "mute")
    # The client gives up on the handshake after timeout_s, which is what this test waits
    # for; it must leave the server time to start its child first, even on a loaded machine.
    with pytest.raises(ConnectionError, match="failed to start"):
        MCPClient(server, timeout_s=5)
    assert not any(_alive(pid) for pid in _pids(pids))


HOST = f"""
import os, signal, sys
from ratchet.integrations.mcp import MCPClient, StdioServer
client = MCPClient(StdioServer(sys.executable, sys.argv[1:]), timeout_s={PATIENCE_S})
print("connected", flush=True)
if sys.argv[-1] == "killed":
    os.kill(os.getpid(), signal.SIGKILL)
"""  # "exits": the interpreter ends without closing the client


@pytest.mark.parametrize("how", ["exits", "killed"])
def test_an_mcp_server_dies_with_its_host_process(tmp_path, how):
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN_SERVER)
    pids = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    host = subprocess.run(
        [sys.executable, "-c", HOST, str(script), str(pids), "answer", how],
        capture_output=True, text=True, env=env, timeout=3 * PATIENCE_S,
    )  # fmt: skip
    assert "connected" in host.stdout, host.stderr
    running = _pids(pids)
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:  # the kernel signals the guard as the host goes
        if not any(_alive(pid) for pid in running):
            break
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in running)


def _openenv_client(env, **options):
    pytest.importorskip("openenv")
    from fastapi.testclient import TestClient

    from ratchet.integrations.openenv_server import openenv_app

    return TestClient(openenv_app(env, tasks_per_split=8, **options))


def test_the_openenv_task_api_serves_no_hidden_params():
    from ratchet.envs.calc import env as calc
    from ratchet.envs.code import env as code

    for env in (calc, code):
        client = _openenv_client(env)
        served = client.post(f"/{env.name}/tasks", json={"split": "test"}).json()["tasks"]
        one = client.post(f"/{env.name}/task", json={"split": "test", "index": 0}).json()["task"]
        drawn = env.tasks("test", 8)
        assert [task["prompt"] for task in served] == [task.instruction for task in drawn]
        assert [task["id"] for task in served] == [task.id for task in drawn]
        for listed in (one, *served):
            assert set(listed) == {"id", "index", "prompt"}, listed
        # calc's answers and code's hidden-test seeds are nowhere in what a client gets.
        text = json.dumps([served, one])
        assert "params" not in text and "test_seed" not in text and "answer" not in text


def test_an_openenv_server_with_a_key_refuses_everything_but_health_without_it():
    from starlette.websockets import WebSocketDisconnect

    from ratchet.envs.calc import env as calc

    client = _openenv_client(calc, api_key="s3cret")
    assert client.get("/health").status_code == 200
    for method, path, body in (
        ("post", "/calc/tasks", {"split": "test"}),
        ("get", "/calc/splits", None),
        ("post", "/reset", {}),
        ("get", "/schema", None),
        ("get", "/docs", None),
        ("get", "/openapi.json", None),
    ):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            answer = client.request(method, path, json=body, headers=headers)
            assert answer.status_code == 401, (path, headers, answer.text)
    with pytest.raises(WebSocketDisconnect), client.websocket_connect("/ws") as socket:
        socket.receive_json()
    key = {"Authorization": "Bearer s3cret"}
    assert client.post("/calc/tasks", json={"split": "test"}, headers=key).status_code == 200
    with client.websocket_connect("/ws", headers=key) as socket:
        socket.send_json({"type": "reset", "data": {"split": "test", "index": 0}})
        assert socket.receive_json()["type"] == "observation"


def test_the_dataset_integration_warns_when_it_drops_rows_repeated_across_splits():
    from ratchet.integrations.dataset import RepeatedRows, dataset_env

    def row(n):
        return {"question": f"What is {n} squared?", "answer": str(n * n)}

    data = {
        "train": [row(n) for n in range(20)],  # 3 of them are test questions, 2 probe ones
        "validation": [row(n) for n in (3, 4, 30, 40)],  # one of them a test question
        "test": [row(n) for n in (0, 1, 2, 40, 41)],
    }
    dropped = r"6 rows repeated across splits .*: 5 from train, 1 from probe"
    with pytest.warns(RepeatedRows, match=dropped):
        env = dataset_env(data, name="squares")
    train = {t.params["question"] for t in env.tasks("train", 15)}
    assert not train & {row(n)["question"] for n in (0, 1, 2, 3, 4)}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dataset_env({"train": [row(n) for n in range(5)], "test": [row(9)]}, name="clean")
