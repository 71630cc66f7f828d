import pytest

from ratchet.sandbox import Limits, Sandbox, SandboxProcessError, landlock_abi, python_executable

pytestmark = pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")

ECHO = (
    "import sys\n"
    "for line in sys.stdin:\n"
    "    sys.stderr.write('got ' + line)\n"
    "    sys.stdout.write(line.upper() if line != 'quit\\n' else '')\n"
    "    sys.stdout.flush()\n"
    "    if line == 'quit\\n':\n"
    "        break\n"
)


# How long an exchange waits for its answer: only a hang guard (the process's lifetime is as
# long), since a loaded machine can take seconds to start Python in the sandbox.
ANSWER_S = 30.0


@pytest.fixture
def sandbox():
    with Sandbox(Limits(cpu_s=5, memory_mb=256, processes=8, timeout_s=ANSWER_S)) as box:
        yield box


def _start(sandbox: Sandbox, code: str, reply_bytes: int = 1 << 20):
    (sandbox.root / "serve.py").write_text(code)
    return sandbox.start(
        [python_executable(), "-I", "-S", "-B", "serve.py"], reply_bytes=reply_bytes
    )


def test_a_started_process_answers_line_by_line_and_keeps_its_state(sandbox):
    process = _start(sandbox, "import sys\nn = 0\nfor line in sys.stdin:\n    n += 1\n"
                              "    print(n, line.strip(), flush=True)\n")  # fmt: skip
    try:
        assert process.exchange("a", ANSWER_S) == "1 a"
        assert process.exchange("b", ANSWER_S) == "2 b"
        assert process.alive
    finally:
        process.close()
    assert not process.alive


def test_an_exit_is_an_error_with_the_stderr_tail(sandbox):
    process = _start(sandbox, ECHO)
    assert process.exchange("hi", ANSWER_S) == "HI"
    with pytest.raises(
        SandboxProcessError, match="it has exited; its stderr ends:\ngot hi\ngot quit"
    ):
        process.exchange("quit", ANSWER_S)
    assert not process.alive


def test_a_missed_deadline_kills_the_process(sandbox):
    process = _start(sandbox, "import sys, time\nsys.stdin.readline()\ntime.sleep(30)\n")
    with pytest.raises(SandboxProcessError, match="did not answer in time"):
        process.exchange("x", 0.5)
    assert not process.alive


def test_a_reply_over_the_limit_kills_the_process(sandbox):
    process = _start(sandbox, "import sys\nsys.stdin.readline()\nprint('x' * 5000, flush=True)\n",
                     reply_bytes=1000)  # fmt: skip
    with pytest.raises(SandboxProcessError, match="over 1000 bytes"):
        process.exchange("x", ANSWER_S)


def test_the_started_process_is_confined_like_a_run(sandbox, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hidden")
    code = (
        "import sys\nfor line in sys.stdin:\n"
        "    try:\n        print(open(line.strip()).read(), flush=True)\n"
        "    except OSError as exc:\n        print(type(exc).__name__, flush=True)\n"
    )
    process = _start(sandbox, code)
    try:
        assert process.exchange(str(secret), ANSWER_S) == "PermissionError"
    finally:
        process.close()


def test_a_message_must_be_one_line(sandbox):
    process = _start(sandbox, ECHO)
    try:
        with pytest.raises(ValueError, match="one line"):
            process.exchange("a\nb", ANSWER_S)
    finally:
        process.close()
