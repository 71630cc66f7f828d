import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ratchet
from ratchet.sandbox import Limits, Quota, Sandbox, landlock_abi, sweep_stale_workspaces
from ratchet.sandbox.keeper import PREFIX, workspace_prefix

pytestmark = pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")

SMALL = Limits(cpu_s=1, memory_mb=256, processes=8, timeout_s=3.0, output_bytes=2_000,
               file_size_mb=1)  # fmt: skip


@pytest.fixture
def sandbox():
    with Sandbox(SMALL) as box:
        yield box


def test_commands_run_in_the_workspace_and_host_paths_are_hidden(sandbox):
    result = sandbox.run_shell("echo hello > note.txt; cat note.txt; pwd")
    assert result.ok
    assert result.stdout == "hello\n.\n"
    assert (sandbox.root / "note.txt").read_text() == "hello\n"
    assert str(sandbox.root) not in result.stdout


def test_python_runs_isolated_with_a_scrubbed_environment(sandbox):
    result = sandbox.run_python(
        "import os, sys; print(sorted(os.environ)); print(sys.flags.isolated)"
    )
    assert result.ok, result.stderr
    assert "PATH" in result.stdout and "HOME" in result.stdout
    assert result.stdout.splitlines()[1] == "1"


def test_host_files_outside_the_workspace_cannot_be_read(sandbox):
    project_file = Path(ratchet.__file__).resolve()
    result = sandbox.run_shell(f"cat /etc/passwd; cat {project_file}; ls /")
    assert result.stdout == ""
    assert result.stderr.count("Permission denied") == 3


def test_installed_packages_and_the_project_cannot_be_imported(sandbox):
    src = Path(ratchet.__file__).resolve().parents[1]
    result = sandbox.run_python(f"import sys; sys.path.append({str(src)!r}); import ratchet")
    assert result.exit_code == 1
    assert "ModuleNotFoundError" in result.stderr or "PermissionError" in result.stderr
    assert sandbox.run_python("import pydantic").exit_code == 1


def test_nothing_outside_the_workspace_is_writable(sandbox, tmp_path):
    target = tmp_path / "escaped"
    result = sandbox.run_shell(f"echo x > {target}")
    assert result.exit_code != 0
    assert not target.exists()


def test_sockets_cannot_be_opened(sandbox):
    code = (
        "import socket\n"
        "try:\n    socket.socket(socket.AF_INET).connect(('127.0.0.1', 9))\n"
        "except OSError as exc:\n    print('blocked', exc.errno)\n"
    )
    result = sandbox.run_python(code)
    assert result.stdout.startswith("blocked")


def test_a_fork_bomb_is_contained_and_the_next_run_works(sandbox):
    code = (
        "import os\nfor _ in range(100):\n    try:\n        os.fork()\n"
        "    except OSError:\n        print('fork refused'); break\n"
    )
    result = sandbox.run_python(code)
    assert "fork refused" in result.stdout
    bomb = sandbox.run_shell("bomb() { bomb | bomb & }; bomb; sleep 0.5; echo survived")
    assert bomb.killed is None or bomb.killed in {"timeout", "output limit"}
    assert sandbox.run_shell("echo next").stdout == "next\n"


def test_a_memory_bomb_fails_inside_the_sandbox(sandbox):
    result = sandbox.run_python("blob = bytearray(2 * 1024 ** 3)")
    assert result.exit_code == 1
    assert "MemoryError" in result.stderr


def test_an_endless_loop_is_killed(sandbox):
    result = sandbox.run_python("while True: pass")
    assert result.exit_code is None
    assert result.killed in {"cpu time limit", "timeout"}


def test_a_sleeping_command_hits_the_wall_clock_timeout(sandbox):
    result = sandbox.run_shell("sleep 30", limits=Limits(timeout_s=0.5))
    assert result.timed_out
    assert result.killed == "timeout"


def test_output_is_capped(sandbox):
    result = sandbox.run_shell("yes")
    assert result.truncated
    assert result.killed == "output limit"
    assert len(result.stdout.encode()) <= SMALL.output_bytes


def test_file_size_is_limited(sandbox):
    result = sandbox.run_shell("head -c 3000000 /dev/zero > big.bin")
    assert result.exit_code != 0
    assert (sandbox.root / "big.bin").stat().st_size <= 1024 * 1024


def test_background_processes_die_with_the_command(sandbox):
    token = "31.4159"
    sandbox.run_shell(f"setsid sleep {token} > /dev/null 2>&1 & echo started")
    still_running = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline:
            still_running.append(pid)
    assert still_running == []


def test_isolation_layers_are_reported(sandbox):
    layers = sandbox.run_shell("true").isolation
    assert any(layer.startswith("landlock") for layer in layers)
    assert "rlimits" in layers


def test_close_removes_the_workspace():
    box = Sandbox(SMALL)
    (box.root / "file").write_text("x")
    box.close()
    assert not box.root.exists()


def test_bad_limits_and_commands_are_clear_errors(sandbox):
    with pytest.raises(ValueError, match="cpu_s must be positive"):
        Limits(cpu_s=0)
    with pytest.raises(ValueError, match="argv"):
        sandbox.run([])
    assert sandbox.run(["no-such-program-here"]).exit_code == 127


def test_host_unix_sockets_cannot_be_reached(sandbox, tmp_path):
    import socket

    path = tmp_path / "host.sock"
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        server = socket.socket(socket.AF_UNIX, kind)
        server.bind(str(path))
        if kind == socket.SOCK_STREAM:
            server.listen(1)
        os.chmod(path, 0o777)
        os.chmod(tmp_path, 0o755)
        code = (
            "import socket\n"
            f"s = socket.socket(socket.AF_UNIX, {int(kind)})\n"
            "try:\n"
            f"    s.connect({str(path)!r}); print('connected')\n"
            "except OSError as exc:\n    print('blocked', exc.errno)\n"
            "try:\n"
            f"    s.sendto(b'x', {str(path)!r}); print('sent')\n"
            "except OSError as exc:\n    print('blocked', exc.errno)\n"
        )
        result = sandbox.run_python(code)
        server.close()
        path.unlink()
        assert result.stdout.split("\n")[:2] == ["blocked 13", "blocked 13"], result


def test_unix_socket_pairs_still_work_inside(sandbox):
    code = (
        "import socket\na, b = socket.socketpair()\na.sendall(b'ping')\nprint(b.recv(4).decode())"
    )
    assert sandbox.run_python(code).stdout == "ping\n"


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_seccomp_filter_assembles_for_each_known_machine(machine):
    from ratchet.sandbox.seccomp import SYSCALLS, seccomp_program

    program = seccomp_program(SYSCALLS[machine])
    for index, (_, jt, jf, _) in enumerate(program):
        assert 0 <= jt < len(program) - index and 0 <= jf < len(program) - index
    assert program[-1][0] == program[-2][0] == 0x06  # ends in returns


def _pids_running(token):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if token.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def _eventually(condition, attempts=100):
    for _ in range(attempts):
        if condition():
            return True
        time.sleep(0.1)
    return condition()


HOST = """
from ratchet.sandbox import Limits, Sandbox
box = Sandbox(Limits(timeout_s=60, cpu_s=60))
print(box.directory, flush=True)
box.run_shell("sleep {token}")
"""


def test_killing_the_host_kills_the_command_and_its_workspace_is_swept():
    token = "27.18281"
    host = subprocess.Popen(
        [sys.executable, "-c", HOST.format(token=token)], stdout=subprocess.PIPE, text=True
    )
    directory = host.stdout.readline().strip()
    try:
        assert _eventually(lambda: _pids_running(token))
    finally:
        host.kill()
        host.wait()
        host.stdout.close()
    assert _eventually(lambda: not _pids_running(token)), "the sandboxed command outlived the host"
    assert os.path.isdir(directory)
    assert directory in sweep_stale_workspaces()
    assert not os.path.exists(directory)


def test_the_launcher_enforces_the_deadline_without_the_host(sandbox, monkeypatch):
    from ratchet.sandbox import host

    monkeypatch.setattr(host, "HOST_GRACE_S", 3600.0)
    result = sandbox.run_shell("sleep 30", limits=Limits(timeout_s=0.5))
    assert result.killed == "timeout" and result.timed_out


def test_the_sweep_removes_only_workspaces_of_processes_that_are_gone(tmp_path):
    dead = tmp_path / f"{PREFIX}999999999.1-abc"
    alive = tmp_path / f"{workspace_prefix()}abc"
    other = tmp_path / f"{PREFIX}abc"
    for folder in (dead, alive, other):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "file").write_text("x")
    (dead / "sub").chmod(0)
    assert sweep_stale_workspaces(str(tmp_path)) == [str(dead)]
    assert not dead.exists() and alive.exists() and other.exists()


def test_the_workspace_has_a_disk_and_inode_quota():
    with Sandbox(SMALL, quota=Quota(disk_mb=2, inodes=64)) as box:
        if "workspace quota" not in box.run_shell("true").isolation:
            pytest.skip("no user namespaces: the workspace is a plain folder")
        full = box.run_shell("head -c 900000 /dev/zero > a; head -c 900000 /dev/zero > b; "
                             "head -c 900000 /dev/zero > c")  # fmt: skip
        assert full.exit_code != 0 and "No space left" in full.stderr
        many = box.run_shell("for i in $(seq 100); do : > f$i || exit 1; done")
        assert many.exit_code != 0
        assert len(os.listdir(box.root)) < 64


def test_a_plain_folder_is_the_fallback_without_a_keeper(monkeypatch):
    import ratchet.sandbox as sandbox_module

    monkeypatch.setattr(sandbox_module._KEEPER, "get", lambda: None)
    box = Sandbox(SMALL)
    try:
        assert box.root == box.directory
        result = box.run_shell("echo hi > note; cat note")
        assert result.stdout == "hi\n" and "workspace quota" not in result.isolation
    finally:
        box.close()
    assert not box.directory.exists()


def test_the_total_memory_of_all_processes_is_capped(sandbox):
    code = (
        "import os, time\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n        break\n"
        "data = b'x' * (60 << 20)\ntime.sleep(120)\n"
    )
    # The processes outlive the deadline, so only the cap ends the run early, however slowly
    # a VM faults in untouched memory.
    capped = Limits(memory_mb=256, total_memory_mb=150, timeout_s=120.0, cpu_s=8)
    result = sandbox.run_python(code, limits=capped)
    assert result.killed == "memory limit"
    assert "memory cap" in result.isolation


def test_a_dead_keeper_is_replaced_for_new_sandboxes():
    import signal

    import ratchet.sandbox as sandbox_module

    keeper = sandbox_module._KEEPER.get()
    if keeper is None:
        pytest.skip("no user namespaces: there is no keeper")
    os.kill(keeper.pid, signal.SIGKILL)
    assert _eventually(lambda: not keeper.alive())
    with Sandbox(SMALL) as box:
        assert box.run_shell("echo ok > f; cat f").stdout == "ok\n"
        assert sandbox_module._KEEPER.get().pid != keeper.pid
