from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from reconciler.core.load.settings import load_settings, parse_settings
from reconciler.errors import ConfigError
from reconciler.model.settings import (
    DaemonSettings,
    DnsPolicy,
    DnsSettings,
    ListenSettings,
    RepoSettings,
    TsigSettings,
)

ROOT = Path(__file__).resolve().parent.parent


def parse(text: str, base: Path = Path("/etc/proxyfleet")) -> DaemonSettings:
    return parse_settings(text, name="proxyfleet.yaml", base=base)


def errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse(text)
    return str(err.value).splitlines()


def test_a_config_with_only_the_repo_url_gets_every_default() -> None:
    settings = parse("repo:\n  url: git@git.example.org:infra/fleet.git\n")
    assert settings == DaemonSettings(repo=RepoSettings(url="git@git.example.org:infra/fleet.git"))
    assert settings.listen == ListenSettings("127.0.0.1", 9477)
    assert settings.status.branch == "proxyfleet-status"
    assert settings.interval == 300 and settings.jitter == 0.1


def test_every_field_is_read_and_relative_paths_follow_the_config_file() -> None:
    settings = parse(
        """\
repo:
  url: ./fleet
  branch: prod
  path: fleets/eu
  sshKeyFile: git/id_ed25519
  knownHostsFile: /etc/proxyfleet/git/known_hosts
  verifyCommits: true
  allowedSignersFile: allowed_signers
  fetchTimeoutSeconds: 30
interval: 60
jitter: 0.2
ssh: {keyFile: ssh/key, knownHostsFile: ssh/kh, connectTimeoutSeconds: 5}
listen: "[::1]:9000"
webhook: {secretFile: hook.secret}
status: {enabled: false, branch: status, path: .status, history: 3, pushAttempts: 5}
log: {level: debug, format: json}
concurrency: {perHost: 4, deletesPerHost: 8}
replaceTimeoutSeconds: 240
hungAfterSeconds: 900
stateDir: /srv/proxyfleet
""",
        base=Path("/opt/pf"),
    )
    assert settings.repo.url == "/opt/pf/fleet"
    assert settings.repo.local_path == Path("/opt/pf/fleet")
    assert settings.repo.ssh_key_file == Path("/opt/pf/git/id_ed25519")
    assert settings.repo.allowed_signers_file == Path("/opt/pf/allowed_signers")
    assert (settings.repo.branch, settings.repo.path, settings.repo.fetch_timeout) == (
        "prod",
        "fleets/eu",
        30.0,
    )
    assert settings.ssh.key_file == Path("/opt/pf/ssh/key")
    assert settings.ssh.connect_timeout == 5.0
    assert settings.listen == ListenSettings("::1", 9000)
    assert settings.webhook.secret_file == Path("/opt/pf/hook.secret")
    assert not settings.status.enabled and settings.status.history == 3
    assert (settings.log.level, settings.log.format) == ("debug", "json")
    assert settings.concurrency.per_host == 4
    assert settings.concurrency.deletes_per_host == 8
    assert settings.replace_timeout == 240.0
    assert settings.hung_after == 900.0
    assert settings.state_dir == Path("/srv/proxyfleet")


def test_remote_urls_are_not_local_paths() -> None:
    assert RepoSettings(url="git@host:org/fleet.git").local_path is None
    assert RepoSettings(url="https://host/org/fleet.git").local_path is None
    assert RepoSettings(url="file:///srv/fleet.git").local_path == Path("/srv/fleet.git")


def test_unknown_fields_are_named_with_a_suggestion_and_their_line() -> None:
    assert errors("repo:\n  url: /srv/fleet\n  branhc: main\n") == [
        "proxyfleet.yaml:3:3: repo.branhc: unknown field (did you mean 'branch'?)"
    ]
    assert errors("repo:\n  url: /srv/fleet\nzzz: 1\n")[0].startswith(
        "proxyfleet.yaml:3:1: zzz: unknown field; allowed here: concurrency, coordination, "
    )


def test_every_problem_is_reported_at_once_with_file_line_and_column() -> None:
    found = errors(
        "repo:\n  url: /srv/fleet\ninterval: soon\nlisten: localhost\nlog: {format: xml}\n"
    )
    assert found == [
        "proxyfleet.yaml:3:11: interval: must be a number of seconds (at least 1) or a duration "
        "such as 30s, 5m, 1h or 1h30m (got a string ('soon'))",
        "proxyfleet.yaml:4:9: listen: must be host:port, for example 127.0.0.1:9477 "
        "(got 'localhost')",
        "proxyfleet.yaml:5:15: log.format: must be one of logfmt, json (got 'xml')",
    ]


def test_a_hung_cycle_cannot_be_declared_in_less_than_ten_seconds() -> None:
    assert errors("repo:\n  url: /srv/fleet\nhungAfterSeconds: 2\n") == [
        "proxyfleet.yaml:3:19: hungAfterSeconds: must be at least 10 (got 2)"
    ]


def test_verify_commits_needs_an_allowed_signers_file() -> None:
    found = errors("repo:\n  url: /srv/fleet\n  verifyCommits: true\n")
    assert found == ["proxyfleet.yaml:1:1: repo.allowedSignersFile: required field is missing"]


def test_a_missing_repo_and_bad_yaml_are_errors() -> None:
    assert errors("interval: 60\n") == [
        "proxyfleet.yaml:1:1: missing required field 'repo' (or 'fleets')"
    ]
    assert errors("repo:\n\turl: x\n")[0].startswith("proxyfleet.yaml:2:")
    assert errors("- a\n- b\n") == ["proxyfleet.yaml:1:1: the config must be one YAML mapping"]


def test_an_unreadable_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.yaml:0:0: cannot read the config"):
        load_settings(tmp_path / "missing.yaml")


def test_the_example_in_the_operations_guide_is_a_valid_config() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    block = re.search(r"```yaml\n( *repo:\n.*?)\n *```", doc, re.S)
    assert block, "no config example in docs/operations.md"
    text = textwrap.dedent(block.group(1))
    settings = parse(text)
    assert settings.webhook.secret_file == Path("/etc/proxyfleet/webhook-secret")


def test_image_file_dirs_and_the_download_cap_come_from_the_daemon_config(tmp_path: Path) -> None:
    settings = parse(
        "repo:\n  url: /srv/fleet\nimages:\n  allowFileDirs: [/srv/images]\n  maxBytes: 1024\n"
    )
    assert settings.images.allow_file_dirs == (Path("/srv/images"),)
    assert settings.images.max_bytes == 1024
    assert parse("repo:\n  url: /srv/fleet\n").images.allow_file_dirs == ()


def test_a_relative_file_dir_for_images_is_refused() -> None:
    found = errors("repo:\n  url: /srv/fleet\nimages:\n  allowFileDirs: [images]\n")
    assert len(found) == 1 and "images.allowFileDirs[0]" in found[0]


def test_the_manifest_read_limits_come_from_the_repo_group() -> None:
    settings = parse("repo:\n  url: /srv/fleet\n  maxFileBytes: 4096\n  maxRepoBytes: 65536\n")
    assert (settings.repo.max_file_bytes, settings.repo.max_repo_bytes) == (4096, 65536)
    defaults = parse("repo:\n  url: /srv/fleet\n").repo
    assert (defaults.max_file_bytes, defaults.max_repo_bytes) == (1 << 20, 8 << 20)


def test_the_coordination_service_and_its_ttl_are_read_and_default_to_the_file_lock() -> None:
    default = parse("repo:\n  url: /srv/fleet\n").coordination
    assert default.url == "" and default.ttl == 20 and default.poll == 2.0

    settings = parse(
        "repo:\n  url: /srv/fleet\ncoordination:\n"
        "  url: etcd3+http://127.0.0.1:23790\n  ttlSeconds: 6\n"
    )
    assert settings.coordination.url == "etcd3+http://127.0.0.1:23790"
    assert settings.coordination.ttl == 6
    assert settings.coordination.poll == pytest.approx(0.6)


def test_a_coordination_url_no_backend_serves_or_a_tiny_ttl_is_refused_with_its_line() -> None:
    found = errors(
        "repo:\n  url: /srv/fleet\ncoordination:\n  url: redis://cache:6379\n  ttlSeconds: 1\n"
    )
    assert found == [
        "proxyfleet.yaml:4:8: coordination.url: must be an etcd3+http(s)://, zookeeper:// or "
        "file:/// URL (got 'redis://cache:6379')",
        "proxyfleet.yaml:5:15: coordination.ttlSeconds: must be at least 3 (got 1)",
    ]


SEVERAL = """\
fleets:
  - fleet: home
    repo: {url: ./home}
  - fleet: office
    repo: {url: git@git.example.org:infra/office.git, branch: prod}
    status: {branch: office-status}
coordination: {url: "etcd3+http://127.0.0.1:23790", member: mgmt1}
stateDir: /var/lib/pf
"""


def test_several_fleets_each_get_a_one_fleet_config_with_a_state_dir_of_their_own() -> None:
    settings = parse(SEVERAL)
    home, office = settings.per_fleet()

    assert (home.fleet, home.repo.url, home.repo.branch) == ("home", "/etc/proxyfleet/home", "main")
    assert (office.fleet, office.repo.branch, office.status.branch) == (
        "office",
        "prod",
        "office-status",
    )
    assert home.state_dir == Path("/var/lib/pf/fleets/home")
    assert office.state_dir == Path("/var/lib/pf/fleets/office")
    assert home.coordination == office.coordination == settings.coordination
    assert settings.coordination.member == "mgmt1"


def test_the_single_fleet_form_means_what_it_meant() -> None:
    settings = parse("repo:\n  url: /srv/fleet\nfleet: home\n")
    assert settings.fleets == ()
    assert settings.per_fleet() == (settings,)


def test_fleets_exclude_the_single_fleet_fields_and_name_each_fleet_once() -> None:
    found = errors(
        "repo: {url: /srv/a}\nfleets:\n  - fleet: a\n    repo: {url: /srv/a}\n"
        "  - fleet: a\n    repo: {url: /srv/b}\n  - repo: {url: /srv/c}\n"
    )
    assert found == [
        "proxyfleet.yaml:1:1: repo: not allowed beside 'fleets': give each fleet its own under "
        "fleets[]",
        "proxyfleet.yaml:5:5: fleets[1].fleet: fleet 'a' is listed twice",
        "proxyfleet.yaml:7:5: fleets[2].fleet: required field is missing",
    ]


def test_the_libvirt_transport_is_read_and_defaults_to_openssh() -> None:
    assert parse("repo: {url: /srv/fleet}\n").ssh.libvirt_transport == "openssh"
    settings = parse("repo: {url: /srv/fleet}\nssh:\n  libvirtTransport: paramiko\n")
    assert settings.ssh.libvirt_transport == "paramiko"


def test_an_unknown_libvirt_transport_is_refused_with_its_line() -> None:
    assert errors("repo: {url: /srv/fleet}\nssh:\n  libvirtTransport: putty\n") == [
        "proxyfleet.yaml:3:21: ssh.libvirtTransport: must be one of paramiko, openssh (got 'putty')"
    ]


def test_dns_is_off_unless_configured() -> None:
    assert parse("repo: {url: /srv/fleet}\n").dns is None


def test_the_dns_group_is_read_with_its_key_file_relative_to_the_config() -> None:
    settings = parse(
        "repo: {url: /srv/fleet}\n"
        "dns:\n"
        "  server: 192.0.2.53:5353\n"
        "  zone: proxies.example.org.\n"
        "  tsig: {name: proxyfleet, secretFile: dns.secret}\n"
        "  ttl: 2m\n"
        "  policy: upsert-only\n"
    )

    assert settings.dns == DnsSettings(
        server="192.0.2.53:5353",
        zone="proxies.example.org.",
        tsig=TsigSettings(name="proxyfleet", secret_file=Path("/etc/proxyfleet/dns.secret")),
        ttl=120.0,
        policy=DnsPolicy.UPSERT_ONLY,
    )


def test_a_relative_zone_a_server_without_port_and_a_key_without_secret_are_refused() -> None:
    found = errors(
        "repo: {url: /srv/fleet}\n"
        "dns:\n"
        "  server: ns1.example.org\n"
        "  zone: proxies.example.org\n"
        "  tsig: {name: proxyfleet}\n"
    )

    assert found == [
        "proxyfleet.yaml:3:11: dns.server: must be host:port (an IPv6 address in brackets) "
        "(got 'ns1.example.org')",
        "proxyfleet.yaml:4:9: dns.zone: must be an absolute domain name, ending in a dot "
        "(got 'proxies.example.org')",
        "proxyfleet.yaml:5:3: dns.tsig.secretFile: required field is missing",
    ]
