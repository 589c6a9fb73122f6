"""Issue 40, item 3: the repo URL's credential reaches git and nothing else.

A real git remote over HTTP on loopback that refuses clients without the
token; the daemon's checkout and status clone are made through a URL carrying
it. Neither may keep it in a file (``.git/config`` once held it, and a
``userDataFile`` could name that file), and no seed ISO built from the
checkout may carry it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from githttp import serving
from gitutil import git
from reports import report

from reconciler.adapters.git import credentials
from reconciler.adapters.git.gitsource import GitSource
from reconciler.adapters.git.statuswriter import GitStatusWriter
from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.core.load.settings import parse_settings
from reconciler.core.render.seediso import seed_iso
from reconciler.errors import ConfigError, SourceError
from reconciler.model import Owner
from reconciler.model.settings import RepoSettings, StatusSettings
from reconciler.model.vm import VmSpec

BASE = Path(__file__).parent / "hostile" / "base"
TOKEN = "tok-Hunter2-git-credential"
WEB_2 = """apiVersion: proxyfleet/v1
kind: Proxy
metadata:
  name: web-2
spec:
  placement: {zone: lab, image: debian, machineType: small}
  cloudInit:
    userDataFile: cloud-init/squid.cloud-config
"""


def remote_with_fleet(tmp_path: Path) -> tuple[Path, str]:
    """``<tmp>/remotes/fleet.git`` holding the hostile base and a userDataFile proxy."""
    bare = tmp_path / "remotes" / "fleet.git"
    work = tmp_path / "operator"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    shutil.copytree(BASE, work)
    (work / "proxies" / "web-2.yaml").write_text(WEB_2)
    (work / "cloud-init").mkdir()
    (work / "cloud-init" / "squid.cloud-config").write_text("#cloud-config\nhostname: web-2\n")
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "fleet")
    git(work, "push", "-q", str(bare), "main")
    return bare.parent, git(work, "rev-parse", "HEAD")


def files_holding(directory: Path, needle: str) -> list[str]:
    return [
        str(p.relative_to(directory))
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.is_symlink() and needle.encode() in p.read_bytes()
    ]


def seeds(root: Path) -> list[bytes]:
    repo = load_repo_at(root)
    fleet = repo.fleet
    return [
        seed_iso(
            VmSpec(
                domain=f"pf-hostile-{proxy.name}-00000000",
                proxy=proxy.name,
                host=fleet.hosts[0],
                image=fleet.images[0],
                machine_type=fleet.machine_types[0],
                cloud_init=proxy.cloud_init,
                install_guest_agent=False,
                owner=Owner(fleet=fleet.name, proxy=proxy.name, digest="0" * 64),
            )
        )
        for proxy in repo.proxies
    ]


def test_the_checkout_keeps_no_git_credential_and_no_seed_iso_carries_it(tmp_path: Path) -> None:
    remotes, head = remote_with_fleet(tmp_path)
    state = tmp_path / "state"
    with serving(remotes, user="fleet", token=TOKEN) as server:
        public = f"http://127.0.0.1:{server.server_port}/fleet.git"
        settings = RepoSettings(url=public.replace("http://", f"http://fleet:{TOKEN}@"))
        # A checkout made by an older daemon: its .git/config holds the URL as configured.
        git(tmp_path, "init", "-q", str(state / "repo"))
        git(state / "repo", "remote", "add", "origin", settings.url)

        checkout = GitSource(settings, state / "repo").sync()
        published = GitStatusWriter(settings, StatusSettings(), state / "status").publish(
            report(revision=head)
        )
        with pytest.raises(SourceError, match=r"fetching http://127\.0\.0\.1"):
            GitSource(RepoSettings(url=public), tmp_path / "anonymous").sync()

    assert checkout.revision == head  # the token got through: the server refuses without it
    assert published.commit and not published.error
    assert server.refused >= 1
    assert git(state / "repo", "config", "remote.origin.url") == public
    assert git(state / "status", "config", "remote.origin.url") == public
    assert files_holding(state, TOKEN) == []
    found = seeds(checkout.root)
    assert len(found) == 2 and all(b"#cloud-config" in iso for iso in found)
    assert [iso for iso in found if TOKEN.encode() in iso] == []


def test_the_credential_is_split_from_an_http_url_and_handed_over_in_the_environment() -> None:
    url = "https://deploy%40corp:p%3Ass%2Fword@git.example.org:8443/infra/fleet.git"

    public, credential = credentials.split(url)
    env = credentials.environment(url)

    assert public == "https://git.example.org:8443/infra/fleet.git"
    assert credential == credentials.Credential("deploy@corp", "p:ss/word")
    assert "p:ss" not in repr(credential)
    assert env["GIT_CONFIG_KEY_0"] == "credential.helper" and env["GIT_CONFIG_VALUE_0"] == ""
    assert env["GIT_CONFIG_KEY_1"] == f"credential.{public}.helper"
    assert "p:ss" not in env["GIT_CONFIG_VALUE_1"]
    assert env[credentials.TOKEN_VARIABLE] == "p:ss/word"


def test_ssh_and_credential_free_urls_are_left_as_written() -> None:
    for url in ("git@git.example.org:infra/fleet.git", "ssh://git@host/x.git", "file:///srv/x"):
        assert credentials.split(url) == (url, None)
        assert credentials.environment(url) == {}


def test_a_credential_with_a_line_break_is_refused_at_its_line_without_showing_it(
    tmp_path: Path,
) -> None:
    url = "https://user:Hunter2%0Apassword=x@git.example.org/fleet.git"
    config = f"listen: 127.0.0.1:0\nrepo:\n  url: {url}\n"

    with pytest.raises(ConfigError) as loaded:
        parse_settings(config, name="proxyfleet.yaml", base=tmp_path)
    with pytest.raises(ConfigError) as split:
        credentials.split(url)

    assert str(loaded.value) == (
        "proxyfleet.yaml:3:8: repo.url: the URL's credential holds a line break or NUL; "
        "git cannot be given it"
    )
    assert "Hunter2" not in str(split.value)
