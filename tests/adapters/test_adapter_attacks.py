"""The adapters' security battery: each attack found by red-teaming, as a regression test."""

from pathlib import Path

import pytest

from ratchet.adapters.harbor import harbor_env, read_task
from ratchet.core.tool import ToolCall
from ratchet.engine.harness import replay
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
