from __future__ import annotations

import os
from pathlib import Path

import pytest

from reconciler.adapters.repo.diskfiles import DiskRepoFiles, load_repo_at
from reconciler.core.load.repofiles import ReadLimits
from reconciler.errors import InvalidInput, Problem

BASE = Path(__file__).parent / "hostile" / "base"
DEFAULT = ReadLimits()


def copy_base(root: Path) -> None:
    for path in BASE.rglob("*.yaml"):
        target = root / path.relative_to(BASE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())


def problems(root: Path, limits: ReadLimits = DEFAULT) -> list[str]:
    with pytest.raises(InvalidInput) as caught:
        load_repo_at(root, limits=limits)
    return [str(p) for p in caught.value.problems]


def test_a_file_of_exactly_the_limit_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    copy_base(tmp_path)
    (tmp_path / "pad.yaml").write_text("#" + "x" * 98 + "\n")
    limits = ReadLimits(max_file_bytes=100, max_repo_bytes=10_000)
    reader = DiskRepoFiles(tmp_path, limits)
    assert isinstance(reader.read("pad.yaml"), bytes)
    (tmp_path / "pad.yaml").write_text("#" + "x" * 99 + "\n")
    assert reader.read("pad.yaml") == Problem(
        "pad.yaml", 0, 0, "", "larger than the limit of 100 bytes"
    )


def test_the_whole_repo_cap_names_the_first_file_past_it(tmp_path: Path) -> None:
    copy_base(tmp_path)
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.yaml").write_text("#" + "x" * 398 + "\n")
    size = sum(p.stat().st_size for p in tmp_path.rglob("*.yaml"))
    found = problems(tmp_path, ReadLimits(max_file_bytes=1000, max_repo_bytes=size - 1))
    assert len(found) == 1
    assert found[0].startswith("proxies/web-1.yaml:0:0: the repo's manifests exceed the limit of")


def test_a_fifo_named_like_a_manifest_is_refused_without_blocking(tmp_path: Path) -> None:
    copy_base(tmp_path)
    os.mkfifo(tmp_path / "pipe.yaml")
    assert problems(tmp_path) == [
        "pipe.yaml:0:0: is a FIFO (named pipe); manifests must be regular files"
    ]


def test_a_link_swapped_in_after_the_walk_is_still_not_followed(tmp_path: Path) -> None:
    copy_base(tmp_path)
    entries = DiskRepoFiles(tmp_path, DEFAULT).walk()
    assert [e.rel for e in entries if not e.problem] == ["fleet.yaml", "proxies/web-1.yaml"]
    secret = tmp_path.parent / "secret.txt"
    secret.write_text("password: Hunter2\n")
    (tmp_path / "proxies" / "web-1.yaml").unlink()
    (tmp_path / "proxies" / "web-1.yaml").symlink_to(secret)
    read = DiskRepoFiles(tmp_path, ReadLimits()).read("proxies/web-1.yaml")
    assert isinstance(read, Problem) and "symbolic link" in read.message


def test_links_outside_manifests_are_left_alone(tmp_path: Path) -> None:
    copy_base(tmp_path)
    (tmp_path / "README").symlink_to("/etc/hostname")
    (tmp_path / ".hidden").symlink_to("/etc")
    assert load_repo_at(tmp_path).fleet.name == "hostile"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_directory_or_fifo_where_a_file_is_expected_is_refused_and_leaks_no_descriptor(
    tmp_path: Path,
) -> None:
    copy_base(tmp_path)
    (tmp_path / "proxies" / "web-1.yaml").write_text(
        (BASE / "proxies" / "web-1.yaml").read_text().split("    userData:")[0]
        + "    userDataFile: cloud-init/squid.cloud-config\n"
    )
    (tmp_path / "cloud-init" / "squid.cloud-config").mkdir(parents=True)
    (tmp_path / "secrets" / "pw.age").mkdir(parents=True)
    os.mkfifo(tmp_path / "secrets" / "fifo.age")
    reader = DiskRepoFiles(tmp_path, DEFAULT)
    before = open_fds()

    for _ in range(50):  # one leaked descriptor a load was one a daemon cycle
        found = problems(tmp_path)
        directory = reader.read("secrets/pw.age")
        fifo = reader.read("secrets/fifo.age")

    assert open_fds() == before
    assert found == [
        "proxies/web-1.yaml:8:19: spec.cloudInit.userDataFile: 'cloud-init/squid.cloud-config' "
        "is a directory; userData files must be regular files"
    ]
    assert directory == Problem(
        "secrets/pw.age", 0, 0, "", "is a directory; manifests must be regular files"
    )
    assert fifo == Problem(
        "secrets/fifo.age", 0, 0, "", "is a FIFO (named pipe); manifests must be regular files"
    )
