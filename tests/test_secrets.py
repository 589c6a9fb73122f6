"""Secrets: ``${secret:NAME}`` in userData, ``secrets/NAME.age`` made with age, used on the box.

Each rule of reconciler.core.load.secretrefs and reconciler.adapters.secrets.agesecrets, on small
repos written here; identities and ciphertexts come from the real ``age`` tools.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import pytest
from secretutil import make_identity, write_secret

from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.adapters.secrets.agesecrets import AgeIdentity, load_identity
from reconciler.cli import main
from reconciler.core.load.repofiles import ReadLimits
from reconciler.core.load.secretrefs import CHECK_ONLY, SecretAccess, fingerprint
from reconciler.core.plan.digest import proxy_digest
from reconciler.core.render.seediso import seed_files
from reconciler.errors import ConfigError, InvalidInput
from reconciler.model import Repo
from reconciler.model.inventory import Owner
from reconciler.model.secrets import SENSITIVE
from reconciler.model.vm import VmSpec

FLEET = """\
kind: Fleet
metadata:
  name: lab
spec:
  images:
    deb:
      url: https://example.org/deb.qcow2
      sha256: abababababababababababababababababababababababababababababababab
  machineTypes:
    small: {vcpus: 1, memoryMiB: 512, diskGiB: 5}
  hosts:
    - name: h1
      address: 10.0.0.1
      zone: z1
      network: {network: default}
"""

PROXY = """\
kind: Proxy
metadata:
  name: NAME
spec:
  placement: {zone: z1, image: deb, machineType: small}
  cloudInit:
    userData: |
      #cloud-config
      write_files:
        - path: /etc/squid/passwd
          content: "proxy:${secret:squid-password}"
"""
REFERENCE_LINE = 11  # the line of ${secret:squid-password} in PROXY


def repo_with(tmp_path: Path, *names: str, text: str = PROXY) -> Path:
    root = tmp_path / "fleet"
    (root / "proxies").mkdir(parents=True)
    (root / "fleet.yaml").write_text(FLEET)
    for name in names:
        (root / "proxies" / f"{name}.yaml").write_text(text.replace("NAME", name))
    return root


@pytest.fixture
def identity(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "identity.txt"
    return path, make_identity(path)


def decrypting(path: Path) -> SecretAccess:
    return SecretAccess(load_identity(path), need_values=True)


def messages(exc: pytest.ExceptionInfo[InvalidInput]) -> list[str]:
    return [str(p) for p in exc.value.problems]


def test_a_secret_made_with_age_is_decrypted_into_the_seed_and_shown_nowhere_else(
    tmp_path: Path, identity: tuple[Path, str]
) -> None:
    root = repo_with(tmp_path, "web-1")
    write_secret(root, "squid-password", "s3cr3t-value-1\n", identity[1])

    repo = load_repo_at(root, secrets=decrypting(identity[0]))

    cloud = repo.proxies[0].cloud_init
    assert "${secret:squid-password}" in cloud.user_data  # the text as written
    assert 'content: "proxy:s3cr3t-value-1"\n' in cloud.rendered_user_data()  # one \n dropped
    (secret,) = cloud.secrets
    assert secret.value == "s3cr3t-value-1"
    for shown in (repr(repo), repr(cloud), repr(secret), str(secret), f"{secret}"):
        assert "s3cr3t" not in shown
    assert str(secret) == SENSITIVE
    seed = seed_files(vm_spec(repo))
    assert b"proxy:s3cr3t-value-1" in seed["user-data"]


def vm_spec(repo: Repo) -> VmSpec:
    proxy = repo.proxies[0]
    return VmSpec(
        domain="pf-lab-web-1-00000000",
        proxy=proxy.name,
        host=repo.fleet.hosts[0],
        image=repo.fleet.images[0],
        machine_type=repo.fleet.machine_types[0],
        cloud_init=proxy.cloud_init,
        install_guest_agent=False,
        owner=Owner(fleet="lab", proxy=proxy.name, digest="0" * 64),
    )


def test_an_ascii_armored_secret_decrypts_too(tmp_path: Path, identity: tuple[Path, str]) -> None:
    root = repo_with(tmp_path, "web-1")
    write_secret(root, "squid-password", "armored", identity[1], armor=True)

    repo = load_repo_at(root, secrets=decrypting(identity[0]))

    assert repo.proxies[0].cloud_init.secrets[0].value == "armored"


def test_without_an_identity_validate_only_needs_each_referenced_file_to_exist(
    tmp_path: Path, identity: tuple[Path, str]
) -> None:
    root = repo_with(tmp_path, "web-1")
    with pytest.raises(InvalidInput) as missing:
        load_repo_at(root, secrets=CHECK_ONLY)
    assert messages(missing) == [
        f"proxies/web-1.yaml:{REFERENCE_LINE}:11: spec.cloudInit.userData: secret "
        "'squid-password' (secrets/squid-password.age): the repo has no secrets/ folder"
    ]
    (root / "secrets").mkdir()
    with pytest.raises(InvalidInput) as absent:
        load_repo_at(root, secrets=CHECK_ONLY)
    assert messages(absent) == [
        f"proxies/web-1.yaml:{REFERENCE_LINE}:11: spec.cloudInit.userData: secret "
        "'squid-password' (secrets/squid-password.age) does not exist; make it with age "
        "(docs/operations.md)"
    ]
    write_secret(root, "squid-password", "x", identity[1])
    repo = load_repo_at(root, secrets=CHECK_ONLY)
    assert repo.proxies[0].cloud_init.secrets == ()  # checked, not decrypted


def test_validate_with_another_identity_names_file_line_field_and_the_identity(
    tmp_path: Path, identity: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root = repo_with(tmp_path, "web-1")
    write_secret(root, "squid-password", "x", identity[1])
    other = tmp_path / "other.txt"
    make_identity(other)

    code = main(["validate", "--repo", str(root), "--age-identity", str(other)])

    assert code == 1
    assert capsys.readouterr().err.splitlines() == [
        f"proxies/web-1.yaml:{REFERENCE_LINE}:11: spec.cloudInit.userData: secret "
        f"'squid-password' (secrets/squid-password.age) does not decrypt with the age identity "
        f"{other}: No matching keys found"
    ]
    assert main(["validate", "--repo", str(root), "--age-identity", str(identity[0])]) == 0


def test_plan_and_apply_without_an_identity_refuse_a_repo_that_references_a_secret(
    tmp_path: Path, identity: tuple[Path, str]
) -> None:
    root = repo_with(tmp_path, "web-1")
    write_secret(root, "squid-password", "x", identity[1])

    with pytest.raises(InvalidInput) as exc:
        load_repo_at(root, secrets=SecretAccess(need_values=True))

    (message,) = messages(exc)
    assert message.startswith(f"proxies/web-1.yaml:{REFERENCE_LINE}:11: spec.cloudInit.userData:")
    assert "needs an age identity to be decrypted (--age-identity FILE" in message


def test_each_secret_is_read_and_decrypted_once_however_many_proxies_use_it(
    tmp_path: Path, identity: tuple[Path, str]
) -> None:
    root = repo_with(tmp_path, "web-1", "web-2", "web-3")
    write_secret(root, "squid-password", "shared", identity[1])
    real = load_identity(identity[0])
    calls: list[bytes] = []

    class Counting:
        source = real.source

        def decrypt(self, ciphertext: bytes) -> bytes:
            calls.append(ciphertext)
            return real.decrypt(ciphertext)

    repo = load_repo_at(root, secrets=SecretAccess(Counting(), need_values=True))

    assert len(calls) == 1
    assert {p.cloud_init.secrets[0].value for p in repo.proxies} == {"shared"}


@pytest.mark.parametrize(
    "reference",
    ["${secret:Squid}", "${secret:../fleet}", "${secret:}", "${secret:Hunter2 the-password}"],
)
def test_a_secret_name_that_is_not_a_plain_file_name_is_refused_without_quoting_it(
    tmp_path: Path, reference: str
) -> None:
    root = repo_with(tmp_path, "web-1", text=PROXY.replace("${secret:squid-password}", reference))
    (root / "secrets").mkdir()

    with pytest.raises(InvalidInput) as exc:
        load_repo_at(root)

    (found,) = messages(exc)
    assert found.startswith(f"proxies/web-1.yaml:{REFERENCE_LINE}:11: spec.cloudInit.userData: ")
    assert "invalid secret name in ${secret:...}" in found
    written = reference.removeprefix("${secret:").removesuffix("}")
    assert not written or written not in found


def test_a_secrets_folder_that_is_a_link_is_not_followed(
    tmp_path: Path, identity: tuple[Path, str]
) -> None:
    write_secret(tmp_path / "outside", "squid-password", "x", identity[1])
    root = repo_with(tmp_path, "web-1")
    (root / "secrets").symlink_to(tmp_path / "outside" / "secrets")

    with pytest.raises(InvalidInput) as exc:
        load_repo_at(root, secrets=decrypting(identity[0]))

    assert messages(exc) == [
        # the walk's own word on any linked folder, and the reference's
        "proxies/web-1.yaml:11:11: spec.cloudInit.userData: secret 'squid-password' "
        "(secrets/squid-password.age): secrets/ is a symbolic link; links are not followed in "
        "the fleet repo",
        "secrets:0:0: is a symbolic link to a directory; links are not followed in the fleet repo",
    ]


def test_a_secret_file_that_is_a_link_out_of_the_repo_is_not_read(
    tmp_path: Path, identity: tuple[Path, str]
) -> None:
    elsewhere = write_secret(tmp_path / "elsewhere", "squid-password", "x", identity[1])
    root = repo_with(tmp_path, "web-1")
    (root / "secrets").mkdir()
    (root / "secrets" / "squid-password.age").symlink_to(elsewhere)

    with pytest.raises(InvalidInput) as exc:
        load_repo_at(root, secrets=decrypting(identity[0]))

    (found,) = messages(exc)
    assert "secret 'squid-password' (secrets/squid-password.age) is a symbolic link" in found


def test_a_secret_file_larger_than_the_read_limit_is_refused(
    tmp_path: Path, identity: tuple[Path, str]
) -> None:
    root = repo_with(tmp_path, "web-1")
    write_secret(root, "squid-password", "x" * 4000, identity[1])

    with pytest.raises(InvalidInput) as exc:
        load_repo_at(root, limits=ReadLimits(max_file_bytes=2048), secrets=decrypting(identity[0]))

    (found,) = messages(exc)
    assert "(secrets/squid-password.age) larger than the limit of 2 KiB" in found


def test_a_reference_in_vendor_data_is_refused_since_only_user_data_is_substituted(
    tmp_path: Path,
) -> None:
    text = PROXY + "    vendorData: |\n      #cloud-config\n      runcmd: [echo ${secret:x}]\n"
    root = repo_with(tmp_path, "web-1", text=text.replace("${secret:squid-password}", "plain"))

    with pytest.raises(InvalidInput) as exc:
        load_repo_at(root)

    assert messages(exc) == [
        "proxies/web-1.yaml:12:17: spec.cloudInit.vendorData: ${secret:...} is substituted in "
        "userData only; here it would stay literal"
    ]


def test_a_rotated_secret_changes_the_digest_and_a_re_encrypted_same_value_does_not(
    tmp_path: Path, identity: tuple[Path, str]
) -> None:
    root = repo_with(tmp_path, "web-1")

    def digest(value: str) -> str:
        write_secret(root, "squid-password", value, identity[1])
        repo = load_repo_at(root, secrets=decrypting(identity[0]))
        fleet = repo.fleet
        return proxy_digest(
            repo.proxies[0],
            fleet.hosts[0],
            image=fleet.images[0],
            machine_type=fleet.machine_types[0],
        )

    first = digest("old-password")
    assert digest("old-password") == first  # new ciphertext (age is randomised), same value
    assert digest("new-password") != first


def test_the_fingerprint_is_scrypt_salted_by_name_not_a_plain_hash_of_the_value() -> None:
    value = "hunter2"
    salt = b"proxyfleet/secret/v1\0squid-password"
    expected = hashlib.scrypt(value.encode(), salt=salt, n=2**15, r=8, p=1, maxmem=64 << 20)

    assert fingerprint("squid-password", value) == expected.hex()
    assert fingerprint("other-name", value) != fingerprint("squid-password", value)
    plain = {hashlib.sha256(value.encode()).hexdigest(), hashlib.md5(value.encode()).hexdigest()}
    assert fingerprint("squid-password", value) not in plain


def test_the_digest_of_a_proxy_without_secrets_is_unchanged_by_the_feature(
    tmp_path: Path,
) -> None:
    root = repo_with(tmp_path, "web-1", text=PROXY.replace("${secret:squid-password}", "x"))
    repo = load_repo_at(root)
    proxy = repo.proxies[0]
    with_empty = dataclasses.replace(proxy.cloud_init, secrets=())
    fleet = repo.fleet
    args = {"image": fleet.images[0], "machine_type": fleet.machine_types[0]}
    assert proxy_digest(proxy, fleet.hosts[0], **args) == proxy_digest(
        dataclasses.replace(proxy, cloud_init=with_empty), fleet.hosts[0], **args
    )


def test_rendering_with_a_secret_left_unresolved_fails_instead_of_seeding_the_reference(
    tmp_path: Path, identity: tuple[Path, str]
) -> None:
    root = repo_with(tmp_path, "web-1")
    write_secret(root, "squid-password", "x", identity[1])
    repo = load_repo_at(root)  # validate's load: files checked, values not read

    with pytest.raises(KeyError):
        seed_files(vm_spec(repo))


def test_an_identity_file_with_a_foreign_line_is_refused_without_quoting_it(
    tmp_path: Path, identity: tuple[Path, str]
) -> None:
    path = tmp_path / "bad.txt"
    path.write_text("# created: today\nAGE-SECRET-KEY-1NOTAKEY-hunter2\n")
    path.chmod(0o600)
    with pytest.raises(ConfigError) as exc:
        load_identity(path)
    assert str(exc.value) == (
        f"{path}:2: not an age identity (expected AGE-SECRET-KEY-1..., as age-keygen writes; "
        "the line is not shown)"
    )
    with pytest.raises(ConfigError, match="cannot read the age identity file"):
        load_identity(tmp_path / "absent.txt")
    link = tmp_path / "link.txt"
    link.symlink_to(identity[0])
    with pytest.raises(ConfigError, match="cannot read the age identity file"):
        load_identity(link)


def test_an_identity_file_may_hold_several_identities_and_any_of_them_decrypts(
    tmp_path: Path, identity: tuple[Path, str]
) -> None:
    second = tmp_path / "second.txt"
    recipient = make_identity(second)
    both = tmp_path / "both.txt"
    both.write_text(identity[0].read_text() + second.read_text())
    both.chmod(0o600)
    root = repo_with(tmp_path, "web-1")
    write_secret(root, "squid-password", "to-the-second", recipient)

    loaded = load_identity(both)

    assert isinstance(loaded, AgeIdentity) and len(loaded.identities) == 2
    repo = load_repo_at(root, secrets=SecretAccess(loaded, need_values=True))
    assert repo.proxies[0].cloud_init.secrets[0].value == "to-the-second"


def test_an_identity_file_group_or_others_can_read_is_refused_as_the_ssh_key_is(
    identity: tuple[Path, str],
) -> None:
    path = identity[0]
    path.chmod(0o640)

    with pytest.raises(ConfigError) as exc:
        load_identity(path)

    assert str(exc.value) == (
        f"{path}: the age identity file is accessible by group or others (mode 0640); chmod 600 it"
    )
    path.chmod(0o600)
    assert len(load_identity(path).identities) == 1


def test_a_fifo_or_a_directory_as_the_identity_file_is_refused_by_name_at_once(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo, 0o600)  # no writer ever opens it: a blocking open would hang for ever
    folder = tmp_path / "folder.txt"
    folder.mkdir(mode=0o700)
    before = len(os.listdir("/proc/self/fd"))

    with pytest.raises(ConfigError) as as_fifo:
        load_identity(fifo)
    with pytest.raises(ConfigError) as as_folder:
        load_identity(folder)

    assert str(as_fifo.value) == f"{fifo}: the age identity file is a FIFO (named pipe)"
    assert str(as_folder.value) == f"{folder}: the age identity file is a directory"
    assert len(os.listdir("/proc/self/fd")) == before


def test_the_daemon_config_names_the_identity_file(tmp_path: Path) -> None:
    from reconciler.core.load.settings import parse_settings

    settings = parse_settings(
        "repo: {url: /srv/fleet}\nsecrets: {ageIdentityFile: keys/age.txt}\n",
        name="proxyfleet.yaml",
        base=tmp_path,
    )

    assert settings.secrets.age_identity_file == tmp_path / "keys" / "age.txt"
    assert os.fspath(settings.secrets.age_identity_file).endswith("keys/age.txt")


@pytest.mark.parametrize("command", ["validate", "plan", "apply"])
def test_an_unusable_identity_file_stops_the_command_naming_the_file(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = repo_with(tmp_path, "web-1")
    missing = tmp_path / "no-such-identity.txt"
    config = tmp_path / "proxyfleet.yaml"
    config.write_text(f"repo: {{url: {root}}}\nstateDir: {tmp_path / 'state'}\n")
    extra = {
        "validate": [],
        "plan": ["--inventory", str(tmp_path / "inventory.json")],
        "apply": ["--yes", "--config", str(config)],
    }[command]

    code = main([command, "--repo", str(root), "--age-identity", str(missing), *extra])

    assert code == 1
    err = capsys.readouterr().err
    assert "the age identity is unusable; nothing was done" in err
    assert f"{missing}: cannot read the age identity file" in err
