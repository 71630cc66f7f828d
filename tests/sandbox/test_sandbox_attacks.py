"""The sandbox's security battery: each attack found by red-teaming, as a regression test."""

import os
import subprocess
import sys

import pytest

from ratchet.sandbox import Limits, Sandbox, landlock_abi

pytestmark = [
    pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock"),
    pytest.mark.skipif(os.uname().machine != "x86_64", reason="syscall numbers are x86-64's"),
]

# The host joins a keyring of its own first, so the test never touches the real session's.
KEYRING_HOST = """
import ctypes, json, sys
from ratchet.sandbox import Limits, Sandbox

libc = ctypes.CDLL(None, use_errno=True)
if libc.syscall(250, 1, None) < 0:  # keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)
    sys.exit(f"cannot join a fresh session keyring: errno {ctypes.get_errno()}")
secret = b"ratchet-keyring-secret-41"
key = libc.syscall(248, b"user", b"ratchet-test", secret, len(secret), -3)  # add_key to @s
if key < 0:
    sys.exit(f"add_key refused: errno {ctypes.get_errno()}")
with Sandbox(Limits(timeout_s=10)) as box:
    inside = box.run_python(sys.argv[1])
buffer = ctypes.create_string_buffer(64)
still = libc.syscall(250, 11, key, buffer, 64)  # keyctl(KEYCTL_READ) on the host
print(json.dumps({"stdout": inside.stdout, "stderr": inside.stderr,
                  "host_reads": buffer.raw[:max(still, 0)].decode()}))
"""  # fmt: skip

# Inside: find the key through @s (search), by its id (its neighbours), and in @u; read it;
# revoke it.
KEYRING_ATTACK = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
found = set()
for ring in (-3, -4):  # @s, @u
    kid = libc.syscall(250, 10, ring, b"user", b"ratchet-test", 0)  # KEYCTL_SEARCH
    print("search", ring, kid, ctypes.get_errno())
    if kid >= 0:
        found.add(kid)
buf = ctypes.create_string_buffer(64)
for kid in found:
    n = libc.syscall(250, 11, kid, buf, 64)  # KEYCTL_READ
    print("READ", buf.raw[:max(n, 0)])
    print("revoke", libc.syscall(250, 3, kid))  # KEYCTL_REVOKE
print("add_key", libc.syscall(248, b"user", b"mine", b"x", 1, -3), ctypes.get_errno())
print("request_key", libc.syscall(249, b"user", b"ratchet-test", None, 0), ctypes.get_errno())
"""


def test_a_key_in_the_host_s_session_keyring_is_neither_readable_nor_revocable():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", KEYRING_HOST, KEYRING_ATTACK],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    if done.returncode and "refused" in done.stderr:
        pytest.skip(f"this kernel has no keyrings for us: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    import json

    seen = json.loads(done.stdout)
    assert "ratchet-keyring-secret-41" not in seen["stdout"], seen
    assert "READ" not in seen["stdout"], seen
    assert seen["host_reads"] == "ratchet-keyring-secret-41"  # not revoked
    # The keyring syscalls themselves are denied with EPERM (1).
    assert "add_key -1 1" in seen["stdout"] and "request_key -1 1" in seen["stdout"], seen


def test_the_sandbox_joins_a_session_keyring_of_its_own():
    with Sandbox(Limits(timeout_s=10)) as box:
        layers = box.run_shell("true").isolation
    assert "session keyring" in layers


NAMESPACES = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name, flag in (("user", 0x10000000), ("net", 0x40000000), ("mount", 0x20000),
                   ("pid", 0x20000000), ("uts", 0x04000000), ("ipc", 0x08000000)):
    print(name, libc.unshare(flag), ctypes.get_errno())
# clone() with a namespace flag (SIGCHLD | CLONE_NEWUSER): the raw syscall, as a fork would.
pid = libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)
if pid == 0:
    os._exit(0)
print("clone", pid if pid < 0 else "child", ctypes.get_errno())
# clone3 is refused outright (its flags sit in memory seccomp cannot read): ENOSYS (38).
print("clone3", libc.syscall(435, 0, 0), ctypes.get_errno())
print("fork", "ok" if os.fork() or os._exit(0) else "")
import threading
t = threading.Thread(target=lambda: None); t.start(); t.join(); print("thread ok")
"""  # fmt: skip


def test_nested_namespaces_cannot_be_created_and_fork_and_threads_still_work():
    with Sandbox(Limits(timeout_s=10)) as box:
        result = box.run_python(NAMESPACES)
    assert result.ok, result
    lines = result.stdout.splitlines()
    for kind in ("user", "net", "mount", "pid", "uts", "ipc"):
        assert f"{kind} -1 1" in lines, result.stdout  # EPERM
    assert "clone -1 1" in lines and "clone3 -1 38" in lines, result.stdout
    assert "fork ok" in lines and "thread ok" in lines


def test_the_unshare_command_fails_inside():
    with Sandbox(Limits(timeout_s=10)) as box:
        result = box.run(["unshare", "--user", "--net", "true"])
    assert result.exit_code not in (0, None), result
