"""A real BIND 9 ``named`` for the tests: one dynamic zone on 127.0.0.1, a TSIG key.

Started from nothing, like libvirtd and sshd are (tests/integration/hostservices.py):
its own config and working directory under the test's tmp dir, the key made by
``tsig-keygen``, the zone open to UPDATE and AXFR signed with that key only,
``named -g`` in the foreground (as root it needs no ``-u``). ``stop`` and ``start``
take the server down and up again over the same zone files and journal.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.model.settings import DnsPolicy, DnsSettings, TsigSettings

ZONE = "proxies.example.org."
KEY = "proxyfleet"
_DIG = ("dig", "@127.0.0.1", "+short", "+tries=1", "+time=2")

_ZONE_FILE = """$TTL 60
@ IN SOA ns.proxies.example.org. hostmaster.example.org. 1 60 60 600 60
@ IN NS ns.proxies.example.org.
ns IN A 127.0.0.1
"""


def tsig_secret(name: str) -> str:
    """A fresh secret, as ``tsig-keygen`` makes one."""
    text = subprocess.run(
        ["tsig-keygen", "-a", "hmac-sha256", name], check=True, capture_output=True, text=True
    ).stdout
    found = re.search(r'secret "([^"]+)"', text)
    assert found is not None, text
    return found.group(1)


@dataclass
class Bind:
    base: Path
    port: int
    transfer: bool = True
    """False: the zone refuses AXFR to everyone (an operator's forgotten allow-transfer)."""
    secret: str = ""
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.secret = tsig_secret(KEY)
        self.secret_file.write_text(self.secret + "\n")
        (self.base / "db.zone").write_text(_ZONE_FILE)
        (self.base / "key.conf").write_text(
            f'key "{KEY}" {{ algorithm hmac-sha256; secret "{self.secret}"; }};\n'
        )
        (self.base / "named.conf").write_text(self._config())
        subprocess.run(["named-checkconf", str(self.base / "named.conf")], check=True)

    @property
    def secret_file(self) -> Path:
        return self.base / "tsig.secret"

    @property
    def log(self) -> Path:
        return self.base / "named.log"

    def settings(
        self, *, secret_file: Path | None = None, key: str = KEY, policy: DnsPolicy = DnsPolicy.SYNC
    ) -> DnsSettings:
        return DnsSettings(
            server=f"127.0.0.1:{self.port}",
            zone=ZONE,
            tsig=TsigSettings(name=key, secret_file=secret_file or self.secret_file),
            ttl=60.0,
            policy=policy,
            timeout=5.0,
        )

    def _config(self) -> str:
        d = self.base
        return f"""
options {{
    directory "{d}";
    listen-on port {self.port} {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
    pid-file "{d}/named.pid";
    session-keyfile "{d}/session.key";
    managed-keys-directory "{d}";
    recursion no;
    dnssec-validation no;
    notify no;
}};
controls {{ }};
include "{d}/key.conf";
zone "{ZONE.rstrip(".")}" {{
    type primary;
    file "{d}/db.zone";
    allow-update {{ key "{KEY}"; }};
    allow-transfer {{ {f'key "{KEY}";' if self.transfer else "none;"} }};
}};
"""

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    shutil.which("named") or "/usr/sbin/named",
                    "-g",
                    "-c",
                    str(self.base / "named.conf"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"named exited: {self.log.read_text()[-2000:]}")
            if self.dig("ns", "A") == ["127.0.0.1"]:
                return
            time.sleep(0.1)
        raise RuntimeError(f"named did not answer: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.proc = None

    def dig(self, name: str, rdtype: str) -> list[str]:
        """The values of ``name`` (relative to the zone) as ``dig +short`` prints them, sorted."""
        fqdn = f"{name}.{ZONE}" if name else ZONE
        out = subprocess.run(
            [*_DIG, "-p", str(self.port), fqdn, rdtype],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        return sorted(line for line in out.splitlines() if line and not line.startswith(";"))

    def nsupdate(self, *commands: str) -> None:
        """Edit the zone by hand, as a person with the key would (``nsupdate -y``)."""
        script = "\n".join([f"server 127.0.0.1 {self.port}", f"zone {ZONE}", *commands, "send", ""])
        subprocess.run(
            ["nsupdate", "-k", str(self.base / "key.conf")],
            input=script,
            text=True,
            check=True,
            capture_output=True,
        )
