"""Reading the kernel's OOM-kill count of a memory cgroup (docs/architecture.md#out-of-memory).

The kill itself, by the real OOM killer, is in ``tests/crossprocess/test_oom_processes.py``.
"""

from pathlib import Path

from agents_app.recovery import memory


def test_this_process_records_its_memory_cgroup_and_count() -> None:
    """A process records the cgroup ``/proc/self/cgroup`` names (v1 ``memory`` hierarchy, else v2) and its count."""
    watch = memory.watch()
    cgroup, _, count = watch.rpartition(" ")
    assert cgroup == memory.memory_cgroup(Path("/proc/self/cgroup")) and cgroup.startswith(("v1:/", "v2:/"))
    assert count.isdigit() and memory.oom_kills(cgroup) == int(count)
    assert not memory.killed_by_oom(watch)  # nothing was killed since


def test_a_cgroup_whose_count_cannot_be_read_is_not_recorded(tmp_path: Path) -> None:
    listing = tmp_path / "cgroup"
    listing.write_text("0::/no/such/group\n7:cpu:/\n")
    assert memory.memory_cgroup(listing) == ""
    assert memory.memory_cgroup(tmp_path / "missing") == ""


def test_a_missing_or_malformed_record_never_says_oom() -> None:
    for recorded in ("", "v1:/x", "v1:/no/such/group 0", "v1:/x notanumber"):
        assert not memory.killed_by_oom(recorded)
