"""Load and plan do no I/O: a repo's files reach the loader through a ``RepoFiles``, so
loading the example fleet from memory and planning it, under an audit hook that sees
every file open, ``os.*`` file call, socket and process, sees none of them."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.core.load import secretrefs
from reconciler.core.load.loadmemo import LoadMemo
from reconciler.core.load.manifests import load_repo
from reconciler.core.load.memoryfiles import MemoryRepoFiles
from reconciler.core.load.repofiles import FileKind
from reconciler.core.load.secretrefs import SecretAccess
from reconciler.core.plan.planner import plan
from reconciler.errors import InvalidInput
from reconciler.model import HostInventory, Inventory, Plan, Repo

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fleet-repo"
WATCHED = ("open", "os.", "socket.", "subprocess.", "shutil.", "tempfile.", "glob.")
UNWATCHED = ("os.putenv", "os.unsetenv")  # pytest names the running test in the environment
SECRET_PROXY = b"""\
kind: Proxy
metadata:
  name: vault
spec:
  placement: {zone: home}
  cloudInit:
    userData: |
      #cloud-config
      write_files: [{path: /etc/pw, content: "${secret:squid-password}"}]
"""


class Plaintext:
    """An age identity whose files hold their plaintext: decryption without a key file."""

    source = "memory"

    def decrypt(self, data: bytes) -> bytes:
        return data


def example_files() -> dict[str, bytes | FileKind]:
    """The example fleet repo, in memory, with a proxy that uses a secret."""
    files: dict[str, bytes | FileKind] = {
        path.relative_to(EXAMPLE).as_posix(): path.read_bytes()
        for path in EXAMPLE.rglob("*")
        if path.is_file()
    }
    files["proxies/vault.yaml"] = SECRET_PROXY
    files["secrets/squid-password.age"] = b"hunter2\n"
    return files


FILES = example_files()


def load_and_plan(files: dict[str, bytes | FileKind]) -> tuple[Repo, Plan]:
    repo = load_repo(MemoryRepoFiles(files), secrets=SecretAccess(decryptor=Plaintext()))
    hosts = tuple(HostInventory(name=h.name, reachable=True) for h in repo.fleet.hosts)
    return repo, plan(repo, Inventory(hosts=hosts))


@pytest.fixture
def world_calls() -> Iterator[list[tuple[Any, ...]]]:
    """Every audited call on the outside world while the test body runs."""
    seen: list[tuple[Any, ...]] = []
    active = [True]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if active[0] and event.startswith(WATCHED) and event not in UNWATCHED:
            seen.append((event, *args))

    load_and_plan(FILES)  # imports, and the package's own schemas, are read once first
    sys.addaudithook(hook)
    try:
        yield seen
    finally:
        active[0] = False


def test_loading_and_planning_a_fleet_from_memory_touches_no_file_socket_or_process(
    world_calls: list[tuple[Any, ...]],
) -> None:
    repo, result = load_and_plan(FILES)

    assert world_calls == []
    assert {p.name for p in repo.proxies} >= {"home-0", "home-1", "vault"}
    (vault,) = [p for p in repo.proxies if p.name == "vault"]
    assert [s.name for s in vault.cloud_init.secrets] == ["squid-password"]
    assert result.summary()["create"] == len(repo.proxies)


def test_the_audit_hook_sees_a_file_opened_and_a_folder_listed(
    world_calls: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    (tmp_path / "x").write_bytes(b"")
    sorted(tmp_path.iterdir())
    events = {event for event, *_ in world_calls}
    assert "open" in events and "os.listdir" in events


def test_a_repo_in_memory_refuses_links_and_special_files_as_the_disk_does() -> None:
    files = dict(FILES)
    files["proxies/pipe.yaml"] = FileKind.FIFO
    files["proxies/link.yaml"] = FileKind.LINK
    files["secrets"] = FileKind.LINK
    with pytest.raises(InvalidInput) as caught:
        load_and_plan(files)
    found = [str(p) for p in caught.value.problems]
    assert "proxies/link.yaml:0:0: is a symbolic link; manifests must be regular files " in (
        "\n".join(found)
    )
    assert any("pipe.yaml:0:0: is a FIFO (named pipe)" in p for p in found)
    assert any("secrets/ is a symbolic link" in p for p in found)


def test_a_memo_passed_in_keeps_each_fingerprint_and_a_load_without_one_keeps_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    computed: list[str] = []
    real = secretrefs.fingerprint

    def counted(name: str, value: str) -> str:
        computed.append(name)
        return real(name, value)

    monkeypatch.setattr(secretrefs, "fingerprint", counted)
    access, memo = SecretAccess(decryptor=Plaintext()), LoadMemo()
    first = load_repo(MemoryRepoFiles(FILES), secrets=access, memo=memo)
    again = load_repo(MemoryRepoFiles(FILES), secrets=access, memo=memo)
    assert first == again and computed == ["squid-password"]
    assert load_repo(MemoryRepoFiles(FILES), secrets=access) == first
    assert computed == ["squid-password"] * 2


CORE = Path(__file__).resolve().parent.parent / "reconciler" / "core"
CACHES = {"cache", "lru_cache"}


def cached_functions() -> dict[str, list[str]]:
    """Every function of ``reconciler/core`` under ``functools.cache``/``lru_cache``, by
    ``module:function``, with its parameters."""
    found: dict[str, list[str]] = {}
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                name = (
                    target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                )
                if name in CACHES:
                    args = node.args
                    params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
                    found[f"{path.relative_to(CORE)}:{node.name}"] = params
    return found


def test_the_core_caches_only_the_packages_own_schemas_never_what_it_was_given() -> None:
    found = cached_functions()
    # what the package ships: a schema file by its kind, read once like code
    assert {name: params for name, params in found.items() if params not in ([], ["kind"])} == {}
    assert (
        "load/schemacheck.py:schema" in found
        and "render/metadata.py:_parse_owner_text" not in found
    )
