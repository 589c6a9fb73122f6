"""cloudInit.userDataFile and the ${proxy.*} variables: one userData for many proxies."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.repo.diskfiles import DiskRepoFiles, load_repo_at
from reconciler.adapters.secrets.agesecrets import load_identity
from reconciler.core.load.manifests import ReadLimits
from reconciler.core.load.secretrefs import SecretAccess
from reconciler.core.load.variables import Values, substitute
from reconciler.core.plan.digest import proxy_digest
from reconciler.errors import InvalidInput
from tests.secretutil import make_identity, write_secret
from tests.test_manifests import MINIMAL_FLEET, write_repo

SHARED = "#cloud-config\nhostname: ${proxy.name}\nwrite_files:\n  - {path: /etc/z, content: x}\n"


def proxy(name: str, *, extra: str = "", user_data_file: str = "squid.cloud-config") -> str:
    return (
        f"---\nkind: Proxy\nmetadata:\n  name: {name}\n{extra}spec:\n"
        "  placement: {zone: z1, image: deb, machineType: small}\n"
        f"  cloudInit: {{userDataFile: {user_data_file}}}\n"
    )


def repo_with(tmp_path: Path, shared: str = SHARED, *proxies: str) -> Path:
    files = {"fleet.yaml": MINIMAL_FLEET, "squid.cloud-config": shared}
    files["p.yaml"] = "".join(proxies or (proxy("p1"), proxy("p2")))
    return write_repo(tmp_path, files)


def problems(root: Path, **options: Any) -> list[str]:
    with pytest.raises(InvalidInput) as caught:
        load_repo_at(root, **options)
    return [str(p) for p in caught.value.problems]


def test_proxies_sharing_a_file_each_get_the_text_with_their_own_name(tmp_path: Path) -> None:
    repo = load_repo_at(repo_with(tmp_path))

    assert [p.cloud_init.user_data.splitlines()[1] for p in repo.proxies] == [
        "hostname: p1",
        "hostname: p2",
    ]


def test_the_shared_file_is_read_once_however_many_proxies_use_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: Counter[str] = Counter()
    real = DiskRepoFiles.read

    def counted(self: DiskRepoFiles, rel: str) -> Any:
        reads[rel] += 1
        return real(self, rel)

    monkeypatch.setattr(DiskRepoFiles, "read", counted)
    load_repo_at(repo_with(tmp_path, SHARED, proxy("p1"), proxy("p2"), proxy("p3")))

    assert reads["squid.cloud-config"] == 1


def test_editing_the_shared_file_changes_the_digest_of_every_proxy_using_it(
    tmp_path: Path,
) -> None:
    def digests() -> list[str]:
        repo = load_repo_at(tmp_path)
        fleet = repo.fleet
        resolved = {"image": fleet.images[0], "machine_type": fleet.machine_types[0]}
        return [proxy_digest(p, fleet.hosts[0], **resolved) for p in repo.proxies]

    repo_with(tmp_path)
    before = digests()
    (tmp_path / "squid.cloud-config").write_text(SHARED + "runcmd: ['true']\n")

    after = digests()

    assert len(set(before)) == 2 and not set(before) & set(after)


def test_a_file_over_the_read_limit_is_refused_at_the_manifest_field(tmp_path: Path) -> None:
    root = repo_with(tmp_path, SHARED + "#" * 2000 + "\n", proxy("p1"))

    assert problems(root, limits=ReadLimits(max_file_bytes=1024)) == [
        "p.yaml:7:29: spec.cloudInit.userDataFile: 'squid.cloud-config' is larger than the "
        "limit of 1 KiB"
    ]


def test_a_linked_folder_on_the_way_to_the_file_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "squid.cloud-config").write_text(SHARED)
    root = repo_with(tmp_path / "repo", SHARED, proxy("p1", user_data_file="up/squid.cloud-config"))
    os.symlink("../outside", root / "up")

    assert problems(root) == [
        "p.yaml:7:29: spec.cloudInit.userDataFile: 'up/squid.cloud-config' is a symbolic link; "
        "userData files must be regular files (links are not followed)",
        "up:0:0: is a symbolic link to a directory; links are not followed in the fleet repo",
    ]


def test_host_is_substituted_for_a_pinned_proxy(tmp_path: Path) -> None:
    pinned = proxy("p1").replace("machineType: small}", "machineType: small, host: h1}")
    root = repo_with(tmp_path, "#!/bin/sh\necho ${proxy.host} ${proxy.zone}\n", pinned)

    assert load_repo_at(root).proxies[0].cloud_init.user_data == "#!/bin/sh\necho h1 z1\n"


def test_secret_references_in_the_file_resolve_and_never_show_in_the_model(
    tmp_path: Path,
) -> None:
    shared = "#cloud-config\nwrite_files:\n  - {path: /etc/pw, content: '${secret:pw}'}\n"
    root = repo_with(tmp_path / "repo", shared, proxy("p1"))
    recipient = make_identity(tmp_path / "id.txt")
    write_secret(root, "pw", "canary-1234", recipient)
    access = SecretAccess(load_identity(tmp_path / "id.txt"), need_values=True)
    (loaded,) = load_repo_at(root, secrets=access).proxies

    assert "${secret:pw}" in loaded.cloud_init.user_data
    assert "canary-1234" in loaded.cloud_init.rendered_user_data()
    assert "canary-1234" not in repr(loaded)


def test_shell_variables_jinja_and_secret_references_are_left_alone() -> None:
    text = "echo ${HOME} {{ v1.local_hostname }} ${secret:pw} $proxy.name ${proxy.name}\n"
    values = Values(name="p1", zone="z1", host=None, labels={}, where="p.yaml:1:1")

    assert substitute(text, values) == (
        "echo ${HOME} {{ v1.local_hostname }} ${secret:pw} $proxy.name p1\n",
        [],
    )


@pytest.mark.parametrize("value", ["two\nlines", "${secret:pw}"])
def test_a_label_holding_a_line_break_or_a_reference_is_not_substituted(value: str) -> None:
    values = Values(name="p1", zone="z1", host=None, labels={"team": value}, where="p.yaml:1:1")

    text, found = substitute("a: b\nteam: ${proxy.labels.team}\n", values)

    assert text == "a: b\nteam: ${proxy.labels.team}\n"
    assert [(f.line, f.column) for f in found] == [(2, 7)]
    assert value not in found[0].message
