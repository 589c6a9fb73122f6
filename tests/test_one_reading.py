"""One read per document: each manifest file is read and parsed once per load; after its
schema check, one reading serves the cross-references, the userData checks and the model."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.repo.diskfiles import DiskRepoFiles, load_repo_at
from reconciler.core.load import manifests, reading
from reconciler.core.load.yamlload import Document
from reconciler.errors import InvalidInput
from tests.test_manifests import MINIMAL_FLEET, MINIMAL_PROXY, write_repo

SECOND_PROXY = MINIMAL_PROXY.replace("name: p1", "name: p2")


class Spent(dict[str, Any]):
    """A document's values after its reading: any later look at them fails the test."""

    def _spent(self, *_: object) -> Any:
        raise AssertionError("a document's values were read again after its reading")

    __getitem__ = get = items = keys = values = __iter__ = __contains__ = __len__ = _spent


def _spend_after_reading(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count the readings; once read, each document's values are Spent."""
    readings: Counter[str] = Counter()

    def wrap(read: Any) -> Any:
        def reading_then_spent(document: Document, *, valid: bool, **options: Any) -> Any:
            result = read(document, valid=valid, **options)
            readings[document.file] += 1
            object.__setattr__(document, "data", Spent())
            return result

        return reading_then_spent

    monkeypatch.setattr(manifests, "read_fleet", wrap(reading.read_fleet))
    monkeypatch.setattr(manifests, "read_proxy", wrap(reading.read_proxy))
    return readings


def test_each_manifest_file_is_read_and_parsed_once_per_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_repo(
        tmp_path,
        {"fleet.yaml": MINIMAL_FLEET, "p1.yaml": MINIMAL_PROXY, "p2.yaml": SECOND_PROXY},
    )
    reads: Counter[str] = Counter()
    parses: Counter[str] = Counter()
    real_read, real_parse = DiskRepoFiles.read, manifests.load_documents

    def read(self: DiskRepoFiles, rel: str) -> Any:
        reads[rel] += 1
        return real_read(self, rel)

    def parse(text: str, file: str, **options: Any) -> Any:
        parses[file] += 1
        return real_parse(text, file, **options)

    monkeypatch.setattr(DiskRepoFiles, "read", read)
    monkeypatch.setattr(manifests, "load_documents", parse)

    repo = load_repo_at(tmp_path)

    assert [proxy.name for proxy in repo.proxies] == ["p1", "p2"]
    assert reads == parses == {"fleet.yaml": 1, "p1.yaml": 1, "p2.yaml": 1}


def test_nothing_after_a_documents_reading_looks_at_its_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_data = "userData: |\n      #cloud-config\n      packages: [squid]\n"
    proxy = MINIMAL_PROXY + f"  cloudInit:\n    {user_data}"
    write_repo(tmp_path, {"fleet.yaml": MINIMAL_FLEET, "p1.yaml": proxy, "p2.yaml": SECOND_PROXY})
    readings = _spend_after_reading(monkeypatch)

    repo = load_repo_at(tmp_path)

    assert readings == {"fleet.yaml": 1, "p1.yaml": 1, "p2.yaml": 1}
    assert repo.fleet.hosts[0].name == "h1"
    assert repo.proxies[0].cloud_init.user_data == "#cloud-config\npackages: [squid]\n"


def test_invalid_documents_are_cross_checked_from_their_reading_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = MINIMAL_FLEET.replace("diskGiB: 5", "diskGiB: 5GB")
    proxy = MINIMAL_PROXY.replace("machineType: small", "machineType: smal") + (
        "  health: {proxyPort: 0}\n"
    )
    write_repo(tmp_path, {"fleet.yaml": fleet, "p1.yaml": proxy, "p2.yaml": proxy})
    readings = _spend_after_reading(monkeypatch)

    with pytest.raises(InvalidInput) as caught:
        load_repo_at(tmp_path)

    assert readings == {"fleet.yaml": 1, "p1.yaml": 1, "p2.yaml": 1}
    unknown = "unknown machine type 'smal' (did you mean 'small'?); fleet.yaml has: small"
    assert [str(p) for p in caught.value.problems] == [
        "fleet.yaml:10:48: spec.machineTypes.small.diskGiB: expected an integer, "
        "got a string ('5GB')",
        f"p1.yaml:5:50: spec.placement.machineType: {unknown}",
        "p1.yaml:6:23: spec.health.proxyPort: must be at least 1 (got 0)",
        "p2.yaml:3:9: metadata.name: duplicate proxy name 'p1' (also at p1.yaml:3:9)",
        f"p2.yaml:5:50: spec.placement.machineType: {unknown}",
        "p2.yaml:6:23: spec.health.proxyPort: must be at least 1 (got 0)",
    ]
