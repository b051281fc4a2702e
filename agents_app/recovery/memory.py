"""Did a dead process die for lack of memory? What Linux's memory cgroups tell (docs/architecture.md#out-of-memory).

The kernel counts, per memory cgroup, the processes its OOM killer killed: ``oom_kill`` in
``memory.events`` (cgroup v2) or in ``memory.oom_control`` (cgroup v1, Linux 4.13+). A process that
claims a turn records its cgroup and that count (``watch``, stored in ``Turn.memory_watch``). When
the turn is found dead, a process on the same host reads the count again (``killed_by_oom``): if
it grew, the OOM killer killed a process of that cgroup while the turn ran, and the dead process
is taken for its victim. Pure: files only, no Django.
"""

import functools
import os
import re
from pathlib import Path

__all__ = ["CGROUP_ROOT", "killed_by_oom", "oom_kills", "watch"]

# Where the cgroup file systems are mounted.
CGROUP_ROOT = Path("/sys/fs/cgroup")
_OOM_KILL = re.compile(r"^oom_kill\s+(\d+)\s*$", re.M)


@functools.cache
def _own_cgroup() -> str:
    """This process's memory cgroup, as ``v2:<path>`` or ``v1:<path>``; "" when there is none to read."""
    return memory_cgroup(Path("/proc/self/cgroup"))


def memory_cgroup(proc_cgroup: Path) -> str:
    """The memory cgroup named in a ``/proc/<pid>/cgroup`` file, when its counter can be read here.

    A v1 ``memory`` hierarchy wins over the v2 unified one (``0::``), which a hybrid host may
    mount without the memory controller.
    """
    try:
        lines = [line.split(":", 2) for line in proc_cgroup.read_text().splitlines() if line.count(":") >= 2]
    except OSError:
        return ""
    v1 = [f"v1:{path}" for _, controllers, path in lines if "memory" in controllers.split(",")]
    v2 = [f"v2:{path}" for number, controllers, path in lines if number == "0" and not controllers]
    return next((cgroup for cgroup in (*v1, *v2) if oom_kills(cgroup) is not None), "")


def _counter_file(cgroup: str) -> Path:
    version, _, path = cgroup.partition(":")
    relative = path.lstrip("/")
    if version == "v1":
        return CGROUP_ROOT / "memory" / relative / "memory.oom_control"
    return CGROUP_ROOT / relative / "memory.events"


def oom_kills(cgroup: str) -> int | None:
    """How many processes of ``cgroup`` the OOM killer has killed; None when it cannot be read."""
    try:
        text = _counter_file(cgroup).read_text()
    except (OSError, ValueError):
        return None
    return _count(text)


def _count(text: str) -> int | None:
    found = _OOM_KILL.search(text)
    return int(found.group(1)) if found else None


@functools.cache
def _own_counter() -> int | None:
    """This process's counter file, opened once: ``watch`` runs for every claimed turn, and a read
    at offset 0 of an open cgroup file makes the kernel write its counts afresh (2 µs, against
    22 µs to open, read and close it)."""
    cgroup = _own_cgroup()
    try:
        return os.open(_counter_file(cgroup), os.O_RDONLY | os.O_CLOEXEC) if cgroup else None
    except OSError:
        return None


def watch() -> str:
    """What a turn claimed by this process records: ``<cgroup> <OOM kills so far>``; "" when unknown."""
    fd = _own_counter()
    try:
        count = None if fd is None else _count(os.pread(fd, 4096, 0).decode())
    except (OSError, ValueError):
        count = None
    return "" if count is None else f"{_own_cgroup()} {count}"


def killed_by_oom(memory_watch: str) -> bool:
    """Whether the OOM killer killed a process of the recorded cgroup since ``memory_watch`` was taken.

    Call it only for a turn whose process is gone, from its host: another host's cgroups are not
    readable here, and neither is anything the turn did not record (then: False).
    """
    cgroup, _, recorded = memory_watch.rpartition(" ")
    if not cgroup or not recorded.isdigit():
        return False
    now = oom_kills(cgroup)
    return now is not None and now > int(recorded)
