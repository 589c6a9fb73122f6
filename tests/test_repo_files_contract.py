"""One contract, two fleet-repo readers: the same cases against ``MemoryRepoFiles`` and
``DiskRepoFiles``.

The memory reader feeds the pure core's load in unit tests (no file system), so what it
lists, reads and refuses must be what the disk reader does with the same tree. Each case
builds one tree both ways: on disk a link is a real symbolic link (to a file, or to a
folder, outside the repo) and a FIFO a real named pipe.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from reconciler.adapters.repo.diskfiles import DiskRepoFiles
from reconciler.core.load.memoryfiles import MemoryRepoFiles
from reconciler.core.load.repofiles import (
    LINK,
    LINKED_DIR,
    NO_SUCH_FILE,
    FileKind,
    ReadLimits,
    RepoFiles,
    kind_problem,
)
from reconciler.errors import Problem

TREE: Mapping[str, bytes | FileKind] = {
    "fleet.yaml": b"a: 1\n",
    "big.yaml": b"b: 22\n",
    "proxies/web-1.yaml": b"c: 3\n",
    "proxies/notes.txt": b"d",
    ".hidden/x.yaml": b"e: 5\n",
    "pipe.yaml": FileKind.FIFO,
    "link.yaml": FileKind.LINK,
    "linked": FileKind.LINK,
}
LIMITS = ReadLimits(max_file_bytes=5, max_repo_bytes=8)

Reader = Callable[[ReadLimits], RepoFiles]


def on_disk(root: Path, outside: Path) -> Reader:
    (outside / "inner").mkdir(parents=True)
    (outside / "inner" / "inner.yaml").write_bytes(b"f: 6\n")
    (outside / "target.yaml").write_bytes(b"g: 7\n")
    for rel, content in TREE.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content is FileKind.FIFO:
            os.mkfifo(path)
        else:
            path.symlink_to(outside / ("target.yaml" if rel.endswith(".yaml") else "inner"))
    return lambda limits: DiskRepoFiles(root, limits)


@pytest.fixture(params=["memory", "disk"])
def reader(request: pytest.FixtureRequest, tmp_path: Path) -> Reader:
    if request.param == "memory":
        return lambda limits: MemoryRepoFiles(TREE, limits)
    return on_disk(tmp_path / "repo", tmp_path / "outside")


def test_contract_the_walk_lists_manifests_sorted_with_the_problem_of_each_non_file(
    reader: Reader,
) -> None:
    entries = reader(ReadLimits()).walk()

    assert [(e.rel, e.problem) for e in entries] == [
        ("big.yaml", ""),
        ("fleet.yaml", ""),
        ("link.yaml", LINK),
        ("linked", LINKED_DIR),
        ("pipe.yaml", kind_problem(FileKind.FIFO)),
        ("proxies/web-1.yaml", ""),
    ]


def test_contract_a_read_gives_a_regular_files_bytes_and_refuses_everything_else(
    reader: Reader,
) -> None:
    files = reader(ReadLimits())

    def problem(rel: str) -> str:
        read = files.read(rel)
        assert isinstance(read, Problem), rel
        return read.message

    assert files.read("fleet.yaml") == b"a: 1\n"
    assert problem("link.yaml") == LINK
    assert problem("linked/inner.yaml") == LINK
    assert problem("pipe.yaml") == kind_problem(FileKind.FIFO)
    assert problem("proxies") == kind_problem(FileKind.FOLDER)
    assert problem("missing.yaml") == NO_SUCH_FILE


def test_contract_kind_says_what_a_path_is_without_following_a_link(reader: Reader) -> None:
    files = reader(ReadLimits())

    kinds = [files.kind(rel) for rel in ("fleet.yaml", "link.yaml", "linked", "pipe.yaml")]

    assert kinds == [FileKind.FILE, FileKind.LINK, FileKind.LINK, FileKind.FIFO]
    assert (files.kind("proxies"), files.kind("missing.yaml")) == (
        FileKind.FOLDER,
        FileKind.MISSING,
    )


def test_contract_siblings_are_the_regular_files_beside_a_path_inside_the_repo_only(
    reader: Reader,
) -> None:
    files = reader(ReadLimits())

    assert files.siblings("proxies/web-2.yaml") == ["proxies/notes.txt", "proxies/web-1.yaml"]
    assert files.siblings("../etc/passwd") == []
    assert files.siblings("linked/inner.yml") == []
    assert files.siblings("nowhere/x.yaml") == []


def test_contract_reads_count_against_the_file_and_the_repo_limits(reader: Reader) -> None:
    files = reader(LIMITS)

    too_big = files.read("big.yaml")
    first = files.read("fleet.yaml")
    past_the_total = files.read("proxies/web-1.yaml")

    assert first == b"a: 1\n"
    assert isinstance(too_big, Problem) and "larger than the limit of 5" in too_big.message
    assert isinstance(past_the_total, Problem)
    assert "manifests exceed the limit of 8" in past_the_total.message
