"""Saved plans: ``proxyfleet plan -out FILE`` writes one, ``proxyfleet apply FILE`` applies it.

A saved plan is what an operator reviewed plus what it was computed from: the
repo (its directory, git revision and a digest of its files), the fleet, a
digest of what each host was observed to run, and a digest of the plan itself.
``apply FILE`` loads, observes and plans again exactly as ``apply`` does, then
goes ahead only when all of that is the same; the plan it carries out is then
the one reviewed, action for action. Anything changed (a commit, an edited
file, a VM that came or went on a host, a halt or a delete budget that moved
the plan) refuses with what changed, and nothing is applied.

No VM is written out, so no userData: a new VM's secrets appear by name only
(as ``plan --json`` shows them, values ``(sensitive)``), and the file is
created mode 0600 all the same. The digests cover what the planner reads, with
one exception: a pool's free bytes move with every guest's writes, so they
are left out of a host's digest (a plan they would change differs, and
that refuses).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.core.load.inventory import inventory_to_dict
from reconciler.engine.reconcile import Prepared
from reconciler.errors import ConfigError
from reconciler.model import HostInventory, Inventory

FORMAT = "proxyfleet.saved-plan/v1"
"""The file's ``format``: a file of any other format is refused, never guessed at."""
MODE = 0o600


@dataclass(frozen=True, slots=True)
class SavedPlan:
    """A plan as reviewed, and what it was computed from."""

    repo: Path
    """The fleet repo's directory, absolute: ``apply FILE`` reads it unless --repo says
    otherwise."""
    fleet: str
    revision: str
    """The commit checked out (``+dirty`` with local changes; "" outside git)."""
    files: str
    """sha256 over the repo's files (paths and contents, ``.git`` left out)."""
    hosts: Mapping[str, str]
    """Host name -> sha256 of what it was observed to run (``host_digest``)."""
    observed: str
    """sha256 of the whole observation: every host's digest and the bases' sizes."""
    plan: str
    """sha256 of the plan's JSON form (``plan --json``)."""
    listing: Mapping[str, Any]
    """The plan as ``plan --json`` prints it, for whoever reads the file."""


def saved(prepared: Prepared, *, root: Path, listing: Mapping[str, Any], path: Path) -> SavedPlan:
    """The saved form of ``prepared`` (a plan made from the repo at ``root``) to be written
    at ``path``; ``listing`` is its ``plan --json`` document."""
    hosts = host_digests(prepared.observation.inventory)
    return SavedPlan(
        repo=root.resolve(),
        fleet=prepared.repo.fleet.name,
        revision=prepared.revision,
        files=files_digest(root, skip=path),
        hosts=hosts,
        observed=observed_digest(prepared.observation.inventory, hosts),
        plan=digest(listing),
        listing=listing,
    )


def changes(
    saved: SavedPlan,
    prepared: Prepared,
    *,
    listing: Mapping[str, Any],
    path: Path,
    root: Path,
) -> list[str]:
    """What differs between the plan saved at ``path`` and the one ``apply`` just prepared
    from the repo at ``root`` (its ``plan --json`` document ``listing``); empty when it is
    the same plan from the same inputs."""
    found = []
    if prepared.repo.fleet.name != saved.fleet:
        found.append(f"the repo is now fleet {prepared.repo.fleet.name}, not {saved.fleet}")
    # "+dirty" is left to the files' digest: a plan file written into the checkout makes
    # git see an untracked file, and only the files say whether the repo changed.
    if _commit(prepared.revision) != _commit(saved.revision):
        found.append(
            f"the repo's revision is {prepared.revision or '(none)'}, "
            f"it was {saved.revision or '(none)'}"
        )
    if files_digest(root, skip=path) != saved.files:
        found.append(f"files under {root} changed since the plan (made from {saved.repo})")
    hosts = host_digests(prepared.observation.inventory)
    for name in sorted(hosts.keys() | saved.hosts.keys()):
        if name not in saved.hosts:
            found.append(f"host {name} is new")
        elif name not in hosts:
            found.append(f"host {name} is gone")
        elif hosts[name] != saved.hosts[name]:
            found.append(f"host {name} runs something else now (a VM or volume came or went)")
    if not found and observed_digest(prepared.observation.inventory, hosts) != saved.observed:
        found.append("the observed state changed (the sizes of the base images)")
    if not found and digest(listing) != saved.plan:
        found.append("planned now, the actions differ (a halt, a back-off or the delete budget)")
    return found


def write(path: Path, plan: SavedPlan) -> None:
    """``plan`` at ``path``, created (or truncated) mode 0600 before a byte is written."""
    document = {
        "format": FORMAT,
        "repo": str(plan.repo),
        "fleet": plan.fleet,
        "revision": plan.revision,
        "files": plan.files,
        "hosts": dict(plan.hosts),
        "observed": plan.observed,
        "plan": plan.plan,
        "listing": dict(plan.listing),
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, MODE)
    os.fchmod(fd, MODE)  # an existing file keeps its mode through O_CREAT
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(document, indent=2) + "\n")


def read(path: Path) -> SavedPlan:
    """The saved plan at ``path``; raises ConfigError saying what is wrong with the file."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the saved plan: {exc.strerror}") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a saved plan (not JSON: {exc})") from exc
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ConfigError(f"{path}: not a saved plan of this proxyfleet (format is not {FORMAT})")
    try:
        hosts = document["hosts"]
        if not isinstance(hosts, dict) or not isinstance(document["listing"], dict):
            raise TypeError("hosts and listing must be objects")
        return SavedPlan(
            repo=Path(_text(document, "repo")),
            fleet=_text(document, "fleet"),
            revision=_text(document, "revision"),
            files=_text(document, "files"),
            hosts={str(k): str(v) for k, v in hosts.items()},
            observed=_text(document, "observed"),
            plan=_text(document, "plan"),
            listing=document["listing"],
        )
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: the saved plan is incomplete ({exc})") from exc


def _commit(revision: str) -> str:
    return revision.removesuffix("+dirty")


def _text(document: Mapping[str, Any], key: str) -> str:
    value = document[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} must be a string")
    return value


def digest(document: object) -> str:
    """sha256 of ``document``'s canonical JSON."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def host_digests(inventory: Inventory) -> dict[str, str]:
    """Every host's ``host_digest``, by name."""
    return {host.name: host_digest(host) for host in inventory.hosts}


def host_digest(host: HostInventory) -> str:
    """sha256 of what ``host`` runs as observed: reachable or not, its domains (name,
    state, owner, size) and its pool's volumes, in name order; its capacity without the
    pool's free bytes."""
    whole = inventory_to_dict(Inventory(hosts=(host,)))["hosts"][0]
    whole.pop("error", None)  # the words of an error change; unreachable is what counts
    whole["domains"] = sorted(whole.get("domains", ()), key=lambda d: str(d["name"]))
    whole["volumes"] = sorted(whole.get("volumes", ()))
    if "capacity" in whole:
        whole["capacity"].pop("poolAvailableBytes", None)
    return digest(whole)


def observed_digest(inventory: Inventory, hosts: Mapping[str, str]) -> str:
    """sha256 over every host's digest and the known sizes of the bases."""
    sizes = {b.volume: b.size_bytes for b in inventory.base_sizes}
    return digest({"hosts": dict(hosts), "baseSizes": sizes})


def files_digest(root: Path, *, skip: Path) -> str:
    """sha256 over every file under ``root`` but ``.git`` and ``skip`` (the saved plan, often
    written into the checkout): each relative path and its bytes, in path order (secrets
    are there age-encrypted, as committed)."""
    total = hashlib.sha256()
    skipped = skip.resolve()
    for path in sorted(_files(root)):
        if path.resolve() == skipped:
            continue
        total.update(str(path.relative_to(root)).encode() + b"\0")
        total.update(hashlib.sha256(path.read_bytes()).digest())
    return total.hexdigest()


def _files(root: Path) -> Iterator[Path]:
    for directory, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            path = Path(directory) / name
            if path.is_file() and not path.is_symlink():
                yield path
