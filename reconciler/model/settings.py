"""Box-local settings (the daemon config): small frozen groups, each with units.

The daemon issue extends this module with repo, interval, listen, webhook,
status and log groups; the loader lives in reconciler.core.load.settings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path


@dataclass(frozen=True, slots=True)
class SshSettings:
    """How the management box reaches its hypervisors."""

    key_file: Path = Path("/etc/proxyfleet/ssh/id_ed25519")
    """Private key, loaded on first use.

    Missing: transient. Unparsable or readable by group/others: permanent.
    """
    known_hosts_file: Path = Path("/etc/proxyfleet/ssh/known_hosts")
    """Strictly checked; entries are port-aware (``[host]:2222``)."""
    connect_timeout: float = 10.0
    """Seconds for TCP connect + SSH handshake + auth."""
    call_timeout: float = 60.0
    """Seconds any single libvirt call may take before it is abandoned as transient."""
    keepalive_interval: float = 15.0
    """Seconds between SSH keepalives on an idle connection."""
    libvirt_transport: str = "openssh"
    """What carries libvirt's bytes (``LIBVIRT_TRANSPORTS``): ``openssh`` (the default)
    through an ``ssh -N -L`` child (the system's OpenSSH client, same key and
    known_hosts), C all the way; ``paramiko`` pumps them through the SSH link in Python."""


LIBVIRT_TRANSPORTS = ("paramiko", "openssh")


@dataclass(frozen=True, slots=True)
class ApplySettings:
    """How the engine carries out a plan and checks the result (the executor's knobs)."""

    per_host_concurrency: int = 4
    """Actions running at once on one host; hosts themselves run in parallel."""
    delete_concurrency: int = 20
    """Deletes running at once on one host, beside (not within) ``per_host_concurrency``'s
    other actions: a delete frees what it holds, and its time is QEMU's exit. Deletes run
    on lanes of the host's session, up to 5 on each (libvirtd serves 5 calls of one
    connection at once, ``max_client_requests``): 20 take four connections beside the one
    other actions use, and as many calls as libvirtd's default ``max_workers``."""
    max_attempts: int = 5
    """Tries per host call on transient errors, the first included."""
    retry_base_delay: float = 2.0
    """Seconds before the first retry; doubles each time, with jitter."""
    retry_max_delay: float = 60.0
    """Seconds: the cap on one backoff delay."""
    retry_deadline: float = 300.0
    """Seconds one host call may spend retrying before it counts as failed."""
    observe_timeout: float = 120.0
    """Seconds to wait for a host's inventory; a slower host counts as unreachable."""
    replace_timeout: float = 600.0
    """Seconds after its creation a replacement VM has to pass its first health check: a
    deadline the planner reads in a later run (no run waits for it); past it the old VM
    stays and the rollout of the revision halts."""
    ip_wait_timeout: float = 300.0
    """Seconds the check waits for the IP of a VM created in this run."""
    poll_interval: float = 5.0
    """Seconds between polls for an IP or a health check that is not there yet."""
    check_concurrency: int = 8
    """Proxies checked (IP lookup + probe) at once."""


@dataclass(frozen=True, slots=True)
class RepoSettings:
    """Where the fleet repo lives and how to trust it."""

    url: str = ""
    """ssh (``git@host:org/fleet.git``, ``ssh://``), ``https://``, ``file://`` or a local path."""
    branch: str = "main"
    """The branch whose head is reconciled."""
    path: str = "."
    """Directory of ``fleet.yaml`` inside the repo, relative to its root."""
    ssh_key_file: Path | None = None
    """Private key for ssh URLs (``GIT_SSH_COMMAND -i``); None: ssh's own defaults."""
    known_hosts_file: Path | None = None
    """known_hosts for the git server (strictly checked when set)."""
    verify_commits: bool = False
    """Refuse a head that ``git verify-commit`` rejects (Stalled, nothing applied)."""
    allowed_signers_file: Path | None = None
    """``gpg.ssh.allowedSignersFile`` for SSH-signed commits; needed with verify_commits."""
    fetch_timeout: float = 120.0
    """Seconds a clone or fetch may take before it is killed and reported."""
    max_file_bytes: int = 1024 * 1024
    """Bytes: the largest manifest file read (1 MiB); a larger one is a problem naming it."""
    max_repo_bytes: int = 8 * 1024 * 1024
    """Bytes: all manifest files of a revision together (8 MiB: about 5 s of YAML to read;
    docs/security.md, "Worst load")."""
    allow_non_fast_forward: bool = False
    """Accept a head that does not descend from the revision checked out (a force-push or a
    rollback); False: such a head is refused (Stalled) and nothing acts on it."""

    @property
    def local_path(self) -> Path | None:
        """The directory when the repo is on this machine (a path or ``file://``), else None."""
        if self.url.startswith("file://"):
            return Path(self.url.removeprefix("file://"))
        if self.url.startswith("/") or self.url.startswith("."):
            return Path(self.url)
        return None


@dataclass(frozen=True, slots=True)
class ListenSettings:
    """The HTTP endpoint for /metrics, /healthz and /hook."""

    host: str = "127.0.0.1"
    port: int = 9477
    """0 picks a free port (tests)."""

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    secret_file: Path | None = None
    """File holding the shared HMAC secret (whitespace stripped). None: POST /hook answers 404."""


@dataclass(frozen=True, slots=True)
class SecretSettings:
    age_identity_file: Path | None = None
    """The age identity that decrypts the fleet repo's ``secrets/NAME.age`` (None: none)."""


@dataclass(frozen=True, slots=True)
class StatusSettings:
    """The status written back to the repo."""

    enabled: bool = True
    branch: str = "proxyfleet-status"
    """A branch of its own (orphan) so that pushes to the fleet branch never race with ours."""
    path: str = ".proxyfleet"
    """Directory for status.yaml and STATUS.md inside that branch."""
    history: int = 10
    """How many past runs the status keeps."""
    push_attempts: int = 3
    """Tries when the remote rejects a push (fetch, regenerate on top, push again; never forced)."""


@dataclass(frozen=True, slots=True)
class LogSettings:
    level: str = "info"
    """debug, info, warning or error (``-v`` on the command line forces debug)."""
    format: str = "logfmt"
    """logfmt or json."""


@dataclass(frozen=True, slots=True)
class ConcurrencySettings:
    per_host: int = 4
    """Actions running at the same time on one host (hosts themselves run in parallel)."""
    deletes_per_host: int = 20
    """Deletes running at the same time on one host (``ApplySettings.delete_concurrency``)."""


@dataclass(frozen=True, slots=True)
class ImageSettings:
    """What the image cache may fetch: the repo names image URLs, the box bounds them."""

    allow_file_dirs: tuple[Path, ...] = ()
    """Directories ``file://`` image URLs may point into (links resolved). Empty: none."""
    max_bytes: int = 16 * 1024**3
    """Bytes: the largest image downloaded (16 GiB); a larger one is a permanent error."""


@dataclass(frozen=True, slots=True)
class GuardSettings:
    """What the engine checks against the box rather than the repo (reconciler.engine.guards)."""

    fleet: str | None = None
    """The fleet id this box acts for; a repo naming another is Stalled. None: not pinned."""
    delete_window: float = 3600.0
    """Seconds over which ``maxDeletesPerRun`` holds, across runs and restarts."""
    state_file: Path | None = None
    """Where deletes of the window are recorded; None: per process only (tests)."""
    max_deletes: int | None = None
    """The box's cap on deletes per window (daemon config ``maxDeletesPerRun``), whatever
    the repo's policy says; None: the repo's policy alone (tests)."""
    allowed_file_dirs: tuple[Path, ...] | None = None
    """Image URLs are checked against the image cache's rules before planning with these
    ``file://`` directories; None: not checked before planning (the cache still refuses)."""


@dataclass(frozen=True, slots=True)
class CoordinationSettings:
    """Where the fleet lock lives (one actor per fleet; active/standby across boxes)."""

    url: str = ""
    """tooz URL: ``etcd3+http://HOST:2379`` or ``zookeeper://HOST:2181`` for several
    boxes; "" means a file lock in ``<stateDir>/locks``, which serves one box."""
    ttl: float = 20.0
    """Seconds a leader's lease outlives its last renewal: a standby takes over at most
    ``ttl`` + ``ttl / 10`` seconds after the leader died or was cut off; the leader
    itself stops acting ``ttl * 2 / 3`` seconds after its last renewal. Not used by
    the file lock, which the kernel drops the moment its holder dies."""

    member: str = ""
    """This daemon's name among the daemons that spread several fleets over themselves (the
    hash ring); unique per coordination URL, stable across restarts so that a restarted
    daemon gets the same fleets back. "": the host name."""

    @property
    def poll(self) -> float:
        """Seconds between a standby's attempts to take the lock."""
        return min(max(self.ttl / 10, 0.2), 2.0)


class DnsPolicy(StrEnum):
    """What the publisher may do to the names it owns (external-dns's ``--policy``)."""

    SYNC = "sync"
    """Create, update and delete: a name the fleet owns and no longer wants goes."""
    UPSERT_ONLY = "upsert-only"
    """Create and update, never delete."""


@dataclass(frozen=True, slots=True)
class TsigSettings:
    """The TSIG key the DNS server accepts updates signed with (``tsig-keygen`` prints one)."""

    name: str
    """The key's name, as the server's ``key "NAME" { ... }`` statement spells it."""
    algorithm: str = "hmac-sha256"
    secret_file: Path | None = None
    """File holding the base64 secret (whitespace stripped), read at each run; never logged."""


@dataclass(frozen=True, slots=True)
class DnsSettings:
    """``dns``: the names published for the fleet's proxies through RFC 2136 (UPDATE + TSIG)."""

    server: str
    """``host:port`` of the primary server that takes the updates (and the zone transfer)."""
    zone: str
    """The zone the names live in, absolute (``proxies.example.org.``)."""
    tsig: TsigSettings | None = None
    """None: unsigned updates (only for a server that allows them by address)."""
    ttl: float = 60.0
    """Seconds: the TTL of every record; a client follows a move at most this late."""
    policy: DnsPolicy = DnsPolicy.SYNC
    timeout: float = 10.0
    """Seconds: the bound on the zone transfer and on the update, each."""


@dataclass(frozen=True, slots=True)
class FleetSettings:
    """One entry of ``fleets``: what differs between the fleets one daemon serves."""

    fleet: str
    """The fleet id (``metadata.name``): its lock's name, its key on the hash ring, and the
    pin a repo naming another fleet is Stalled against."""
    repo: RepoSettings
    status: StatusSettings = StatusSettings()


@dataclass(frozen=True, slots=True)
class DaemonSettings:
    """Everything in /etc/proxyfleet/proxyfleet.yaml."""

    repo: RepoSettings = RepoSettings()
    interval: float = 300.0
    """Seconds between scheduled reconciles."""
    jitter: float = 0.1
    """Fraction of ``interval`` each wait varies by, up or down, so fleets do not beat in step."""
    ssh: SshSettings = SshSettings()
    listen: ListenSettings = ListenSettings()
    webhook: WebhookSettings = WebhookSettings()
    secrets: SecretSettings = SecretSettings()
    status: StatusSettings = StatusSettings()
    log: LogSettings = LogSettings()
    concurrency: ConcurrencySettings = ConcurrencySettings()
    replace_timeout: float = 600.0
    """Seconds a replace's new VM may take to pass its health check (then the rollout halts)."""
    images: ImageSettings = ImageSettings()
    fleet: str | None = None
    """The fleet id this daemon acts for (``metadata.name``); a repo naming another is Stalled."""
    delete_window: float = 3600.0
    """Seconds over which ``policy.maxDeletesPerRun`` holds, persisted in the state dir."""
    max_deletes_per_run: int = 20
    """The box's cap on deletes (replaces count) per ``delete_window``: the repo's
    ``policy.maxDeletesPerRun`` holds only below it, so a commit cannot raise it."""
    hung_after: float = 3600.0
    """Seconds one cycle may go without finishing an action (and three intervals) before the
    daemon calls it hung and stops pinging systemd's watchdog, which then restarts it."""
    coordination: CoordinationSettings = CoordinationSettings()
    state_dir: Path = Path("/var/lib/proxyfleet")
    """Checkouts and the image cache; systemd's StateDirectory."""
    dns: DnsSettings | None = None
    """Where the proxies' names are published; None: nowhere (nothing is published)."""
    fleets: tuple[FleetSettings, ...] = ()
    """Several fleets (the ``fleets`` list) instead of ``repo``/``fleet``/``status``; empty:
    the single fleet those name."""

    def per_fleet(self) -> tuple[DaemonSettings, ...]:
        """The settings of each fleet this daemon serves, as a one-fleet config.

        Without ``fleets``: this config itself, unchanged. With it: one config per entry,
        its repo, fleet pin and status, and a state dir of its own,
        ``<stateDir>/fleets/<fleet>`` (checkout, status clone, image cache, history and
        delete records), so that no two fleets share a file. The lock directory of the
        file backend stays ``<stateDir>/locks``: it is shared by design.
        """
        if not self.fleets:
            return (self,)
        return tuple(
            replace(
                self,
                repo=entry.repo,
                fleet=entry.fleet,
                status=entry.status,
                state_dir=fleet_state_dir(self.state_dir, entry.fleet),
                fleets=(),
            )
            for entry in self.fleets
        )


def fleet_state_dir(state_dir: Path, fleet: str) -> Path:
    """The state dir of one fleet of a config that lists several: ``<stateDir>/fleets/<fleet>``."""
    return state_dir / "fleets" / fleet
