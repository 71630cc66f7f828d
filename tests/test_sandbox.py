import os
from pathlib import Path

import pytest

import ratchet
from ratchet.sandbox import Limits, Sandbox, landlock_abi

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
    from ratchet.sandbox.launcher import _SYSCALLS, seccomp_program

    program = seccomp_program(_SYSCALLS[machine])
    for index, (_, jt, jf, _) in enumerate(program):
        assert 0 <= jt < len(program) - index and 0 <= jf < len(program) - index
    assert program[-1][0] == program[-2][0] == 0x06  # ends in returns
