"""The sandbox launcher: confines itself, then executes the command.

Run by :mod:`ratchet.sandbox` as ``python -I -S -B launcher.py CONFIG``, this module imports
only the standard library (never ratchet: it runs outside the project's environment), which is
also why its two other files, ``seccomp.py`` and ``landlock.py``, are loaded by path. It dies
with the host (a parent-death signal), joins the workspace keeper's namespaces when there is
one, and forks a child that enters fresh user, network and PID namespaces where the kernel
allows, after joining a fresh session keyring (kernel keyrings are not namespaced); that child
forks the command as init of its PID namespace after setting rlimits, a Landlock ruleset and a
seccomp filter. The launcher enforces the wall-clock deadline and the
aggregate memory cap itself, so neither depends on the host staying alive. The final status
goes back to the host as JSON on an inherited pipe.

Run as ``launcher.py --keep``, it is the *workspace keeper* instead: it holds a user and mount
namespace in which each sandbox's workspace is a size- and inode-limited tmpfs, mounted and
unmounted on request (JSON lines on stdin). It exits when its stdin closes, which is when the
host exits or dies, and its tmpfs mounts vanish with it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from functools import cache
from typing import Any

STATUS_FD_ENV = "RATCHET_SANDBOX_STATUS_FD"

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWPID = 0x20000000
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_REC = 1 << 14
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
# How often the launcher adds up the sandbox's resident memory when a total cap is set.
_MEMORY_POLL_S = 0.05


def launcher_main(config: dict[str, Any]) -> None:
    """Run the command described by ``config`` confined, and report its status to the host.

    When the command is killed (deadline, memory cap), the launcher ends its whole process
    group after reporting, itself included, so nothing the command started outlives the run
    even without a PID namespace.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    _die_with(libc, int(config["host_pid"]))
    _seccomp(), _landlock()  # read now: once confined, the launcher cannot read its folder
    deadline = time.monotonic() + float(config["limits"]["timeout_s"])
    status_fd = int(os.environ[STATUS_FD_ENV])
    os.set_inheritable(status_fd, False)
    try:
        status = _supervise(libc, config, deadline)
    except Exception as exc:  # reported to the host, which raises SandboxUnavailable
        status = {"error": f"{type(exc).__name__}: {exc}"}
    with os.fdopen(status_fd, "w") as status_file:
        status_file.write(json.dumps(status))
    if status.get("killed"):
        os.killpg(0, signal.SIGKILL)


def _die_with(libc: Any, parent: int) -> None:
    """Get SIGKILL when ``parent`` exits (and exit now if it already has)."""
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _supervise(libc: Any, config: dict[str, Any], deadline: float) -> dict[str, Any]:
    """Fork the confined child, map its user namespace, watch it, and report its status."""
    keeper = config.get("keeper")
    if keeper is not None:
        parent = os.getppid()
        _join_keeper(libc, keeper)
        _die_with(libc, parent)  # a change of credentials clears the parent-death signal
    ready_read, ready_write = os.pipe()
    mapped_read, mapped_write = os.pipe()
    report_read, report_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_read)
        os.close(mapped_write)
        os.close(report_read)
        _child(libc, config, ready_write, mapped_read, report_write)
    os.close(ready_write)
    os.close(mapped_read)
    os.close(report_write)
    if os.read(ready_read, 1) == b"u":
        write_id_maps(pid, int(config["sandbox_uid"]), nested=keeper is not None)
    os.write(mapped_write, b"1")
    os.close(mapped_write)
    cap_mb = config["limits"].get("total_memory_mb")
    status, killed = _watch(pid, report_read, deadline, int(cap_mb) * 1024 * 1024 if cap_mb else 0)
    _, wait_status = os.waitpid(pid, 0)
    if killed:
        return {"isolation": status.get("isolation", []), "killed": killed}
    if "isolation" not in status or not ({"exit", "signal"} & set(status)):
        raise RuntimeError(f"the confined child failed (wait status {wait_status})")
    return status


def _watch(pid: int, report_fd: int, deadline: float, cap: int) -> tuple[dict[str, Any], str]:
    """Read the child's report until it ends, killing the child at the deadline or the cap.

    Returns the merged report and why the child was killed (``""`` if it was not).
    """
    import select

    status: dict[str, Any] = {}
    buffer = b""
    killed = ""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            killed = "timeout"
        elif cap and _tree_memory(pid) > cap:
            killed = "memory limit"
        if killed:
            os.kill(pid, signal.SIGKILL)
            break
        wait_s = min(remaining, _MEMORY_POLL_S) if cap else remaining
        if not select.select([report_fd], [], [], wait_s)[0]:
            continue
        chunk = os.read(report_fd, 65_536)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            status.update(json.loads(line))
    os.close(report_fd)
    return status, killed


def _tree_memory(root: int) -> int:
    """Resident bytes of every process descended from ``root`` (``root`` itself excluded)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                fields = stat_file.read().rpartition(b")")[2].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    total, stack = 0, list(children.get(root, []))
    page = os.sysconf("SC_PAGE_SIZE")
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/statm", "rb") as statm:
                total += int(statm.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
    return total


def _join_keeper(libc: Any, keeper: dict[str, int]) -> None:
    """Enter the workspace keeper's user and mount namespaces (where the workspace is)."""
    import ctypes

    for kind, flag in (("user", _CLONE_NEWUSER), ("mnt", _CLONE_NEWNS)):
        fd = os.open(f"/proc/{keeper['pid']}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_ino != keeper[kind]:
                raise RuntimeError("the workspace keeper has exited")
            if libc.setns(fd, flag) != 0:
                raise OSError(ctypes.get_errno(), f"setns into the keeper's {kind} namespace")
        finally:
            os.close(fd)


def write_id_maps(pid: int, sandbox_uid: int, nested: bool = False) -> None:
    """Write the uid and gid maps of the user namespace that process ``pid`` just created.

    Args:
        pid: The process that called ``unshare(CLONE_NEWUSER)``.
        sandbox_uid: The unprivileged host uid a root host runs sandboxes as.
        nested: The namespace is inside the keeper's, whose ids it maps one to one.
    """
    uid, gid = os.getuid(), os.getgid()
    if nested:
        # Map the keeper's ids one to one: its uid 0, and on a root host also host root (1);
        # one line each, since a line may not span two of the keeper's own lines.
        count = _mapped_ids()
        if count == 1:
            _deny_setgroups(pid)
        uid_map = gid_map = "".join(f"{i} {i} 1\n" for i in range(count))
    elif uid == 0:
        # Map an unprivileged uid as root of the namespace (so RLIMIT_NPROC applies) and map
        # host root too, so root-owned system files stay readable where Landlock allows.
        uid_map = gid_map = f"0 {sandbox_uid} 1\n1 0 1\n"
    else:
        _deny_setgroups(pid)
        uid_map, gid_map = f"0 {uid} 1\n", f"0 {gid} 1\n"
    with open(f"/proc/{pid}/uid_map", "w") as uid_file:
        uid_file.write(uid_map)
    with open(f"/proc/{pid}/gid_map", "w") as gid_file:
        gid_file.write(gid_map)


def _mapped_ids() -> int:
    """How many uids the user namespace this process is in maps."""
    with open("/proc/self/uid_map") as own:
        return sum(int(line.split()[2]) for line in own if line.strip())


def _deny_setgroups(pid: int) -> None:
    with open(f"/proc/{pid}/setgroups", "w") as setgroups:
        setgroups.write("deny")


def _child(
    libc: Any, config: dict[str, Any], ready_fd: int, mapped_fd: int, report_fd: int
) -> None:
    """Enter namespaces, then fork the command as init of its PID namespace."""
    isolation: list[str] = []
    try:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # Before the user namespace, so the keyring is charged to the host's key quota.
        if _seccomp().join_session_keyring(libc):
            isolation.append("session keyring")
        in_userns = libc.unshare(_CLONE_NEWUSER) == 0
        os.write(ready_fd, b"u" if in_userns else b"-")
        os.close(ready_fd)
        os.read(mapped_fd, 1)
        os.close(mapped_fd)
        if config.get("keeper") is not None:
            isolation.append("workspace quota")
        if in_userns:
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            isolation.append("user namespace")
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if libc.unshare(_CLONE_NEWNET) == 0:
            isolation.append("network namespace")
        pid_ns = libc.unshare(_CLONE_NEWPID) == 0
        if pid_ns:
            isolation.append("pid namespace")
        if config["limits"].get("total_memory_mb"):
            isolation.append("memory cap")
        grandchild = os.fork()
        if grandchild == 0:
            os.close(report_fd)
            _exec_confined(libc, config, in_userns, isolation)
        report = {"isolation": [*isolation, *_confinement_names()]}
        os.write(report_fd, json.dumps(report).encode() + b"\n")
        _, wait_status = os.waitpid(grandchild, 0)
        status: dict[str, Any] = {}
        if os.WIFSIGNALED(wait_status):
            status["signal"] = os.WTERMSIG(wait_status)
        else:
            status["exit"] = os.WEXITSTATUS(wait_status)
        os.write(report_fd, json.dumps(status).encode() + b"\n")
        os.close(report_fd)
        os._exit(0)
    except BaseException as exc:
        os.write(2, f"sandbox: {type(exc).__name__}: {exc}\n".encode())
        os._exit(125)


def keeper_main() -> None:
    """Hold the namespaces whose tmpfs mounts are workspaces; serve requests until EOF."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWUSER) != 0:
        _reply({"error": f"unshare(CLONE_NEWUSER): {os.strerror(ctypes.get_errno())}"})
        return
    _reply({"unshared": True})
    if sys.stdin.readline().strip() != "mapped":
        return
    if libc.unshare(_CLONE_NEWNS) != 0 or libc.mount(
        b"none", b"/", None, _MS_REC | _MS_PRIVATE, None
    ):
        _reply({"error": f"private mount namespace: {os.strerror(ctypes.get_errno())}"})
        return
    _reply({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        path = os.fsencode(request["path"])
        if "size_mb" in request:
            options = (
                f"size={int(request['size_mb'])}m,nr_inodes={int(request['inodes'])},"
                "mode=0700,uid=0,gid=0"
            )
            failed = libc.mount(b"tmpfs", path, b"tmpfs", _MS_NOSUID | _MS_NODEV, options.encode())
        else:
            failed = libc.umount2(path, _MNT_DETACH)
        error = os.strerror(ctypes.get_errno()) if failed else None
        _reply({"error": error} if error else {"ok": True})


def _reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _confinement_names() -> list[str]:
    names = [f"landlock abi {_landlock().landlock_abi()}", "rlimits"]
    if _seccomp().syscalls() is not None:
        names.append("seccomp filter")
    return names


def _exec_confined(
    libc: Any, config: dict[str, Any], in_userns: bool, isolation: list[str]
) -> None:
    try:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        _set_rlimits(config["limits"], in_userns)
        os.chdir(config["cwd"])
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError("prctl(PR_SET_NO_NEW_PRIVS) failed")
        _landlock().restrict_filesystem(libc, config)
        _seccomp().install(libc)
        os.execve(config["argv"][0], config["argv"], config["env"])
    except BaseException as exc:
        os.write(2, f"sandbox: cannot start {config['argv'][0]}: {exc}\n".encode())
        os._exit(126)


def _set_rlimits(limits: dict[str, Any], in_userns: bool) -> None:
    import resource

    processes = int(limits["processes"])
    if not in_userns:
        # Without a fresh user namespace RLIMIT_NPROC counts every process of this uid.
        processes += _processes_of_uid(os.getuid())
    mb = 1024 * 1024
    for kind, value in (
        (resource.RLIMIT_CPU, int(limits["cpu_s"])),
        (resource.RLIMIT_AS, int(limits["memory_mb"]) * mb),
        (resource.RLIMIT_NPROC, processes),
        (resource.RLIMIT_NOFILE, int(limits["open_files"])),
        (resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) * mb),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(kind, (value, value))


def _processes_of_uid(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


def _seccomp() -> Any:
    """The sibling ``seccomp.py`` (see :func:`_sibling`)."""
    return _sibling("seccomp")


def _landlock() -> Any:
    """The sibling ``landlock.py`` (see :func:`_sibling`)."""
    return _sibling("landlock")


@cache
def _sibling(name: str) -> Any:
    """The sibling module ``NAME.py``, loaded by path.

    Isolated mode (``-I``) puts the launcher's directory on no import path, and the launcher
    must not import ratchet.
    """
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"ratchet_sandbox_{name}", os.path.join(os.path.dirname(__file__), f"{name}.py")
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"the sandbox's {name}.py is missing")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    if sys.argv[1] == "--keep":
        keeper_main()
    else:
        launcher_main(json.loads(sys.argv[1]))
