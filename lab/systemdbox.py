"""systemd as PID 1 of a container, on a machine whose own PID 1 is not systemd.

``SystemdBox`` boots a root (``lab/systemdroot.py``) with ``systemdbox.sh``: systemd runs
as PID 1 in mount, PID, UTS, IPC and cgroup namespaces of its own, on an overlay of the
cached root, sharing the machine's network namespace (so the box reaches services on
127.0.0.1 and the machine reaches the box's listeners). Its cgroups are made below the
caller's own in every hierarchy of the machine and mounted writable inside, so resource
directives act on real controllers. Commands run inside with ``nsenter``; ``stop()``
powers the box off and removes its cgroups.

Not ``systemd-nspawn --boot``: without systemd on the machine, nspawn mounts the legacy
controller hierarchies read-only, and the unit's ``MemoryMax=``, ``TasksMax=`` and
``DevicePolicy=`` would then not be enforced.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "systemdbox.sh"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def cgroup_mounts() -> dict[frozenset[str], Path]:
    """Each cgroup hierarchy's mount point, keyed by its controllers (empty: cgroup2)."""
    found: dict[frozenset[str], Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype, _, options = [*right.split(), "", "", ""][:3]
        point = Path(left.split()[4])
        if fstype == "cgroup2":
            found[frozenset()] = point
        elif fstype == "cgroup":
            found[frozenset(options.split(",")) - {"rw", "ro"}] = point
    return found


def own_cgroups() -> list[Path]:
    """The directories of this process's cgroups, one per hierarchy."""
    mounts = cgroup_mounts()
    dirs = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        key = frozenset(controllers.split(",")) - {""}
        if key in mounts:
            dirs.append(mounts[key] / path.lstrip("/"))
    return dirs


PREFIX = "pf-systemdbox-"


def make_cgroups(name: str) -> list[Path]:
    """A child cgroup named ``name`` below each of this process's own (after sweeping the
    boxes a killed test session left there)."""
    made = []
    for parent in own_cgroups():
        for stale in parent.glob(f"{PREFIX}*"):
            sweep(stale)
        child = parent / name
        child.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):  # a v1 cpuset starts empty
            if (parent / knob).is_file():
                (child / knob).write_text((parent / knob).read_text())
        made.append(child)
    return made


def sweep(cgroup: Path) -> None:
    """A box's cgroup whose session (``pf-systemdbox-<pid>-...``) is dead: its processes
    killed, the cgroup removed. A live session's box is left alone."""
    owner = cgroup.name.removeprefix(PREFIX).split("-")[0]
    if not owner.isdigit() or Path(f"/proc/{owner}").exists():
        return
    for procs in cgroup.rglob("cgroup.procs"):
        for pid in procs.read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    time.sleep(0.5)
    remove_cgroup(cgroup)


def remove_cgroup(path: Path) -> None:
    """Remove a cgroup and every cgroup below it (empty once the box's PID 1 has gone)."""
    if not path.is_dir():
        return
    for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            sub.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()


class SystemdBox:
    """One booted container; ``binds`` are machine directories seen read-only inside."""

    def __init__(self, root: Path, state: Path, *, binds: tuple[Path, ...] = ()) -> None:
        self.root = root
        self.state = state
        self.binds = binds
        self.log = state / "console.log"
        self.leader: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._cgroups: list[Path] = []

    def start(self, timeout: float = 180.0) -> float:
        """Boot and wait until systemd says the boot is over; the seconds it took."""
        started = time.monotonic()
        self.state.mkdir(parents=True, exist_ok=True)
        self._cgroups = make_cgroups(f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}")
        (self.state / "cgroups").write_text("".join(f"{c}/cgroup.procs\n" for c in self._cgroups))
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                [str(SCRIPT), str(self.state), str(self.root), *map(str, self.binds)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.leader = self._wait_for_leader(started + 30)
        bus = Path(f"/proc/{self.leader}/root/run/systemd/private")
        while not bus.is_socket():  # systemctl's socket to PID 1
            if time.monotonic() > started + timeout or self._proc.poll() is not None:
                raise RuntimeError(f"systemd in the box never listened on {bus}:\n{self.tail()}")
            time.sleep(0.1)
        state = self.run(
            "systemctl", "is-system-running", "--wait", check=False, timeout=timeout
        ).stdout.strip()
        if state not in ("running", "degraded"):
            raise RuntimeError(f"the box's systemd did not boot ({state!r}):\n{self.tail()}")
        return time.monotonic() - started

    def _wait_for_leader(self, deadline: float) -> int:
        """PID 1 of the box (as the machine numbers it), once it is systemd."""
        assert self._proc is not None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the box exited at once:\n{self.tail()}")
            for child in children(self._proc.pid):
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                        return child
            time.sleep(0.1)
        raise RuntimeError(f"systemd did not start in the box:\n{self.tail()}")

    def run(
        self, *argv: str, check: bool = True, timeout: float = 120.0, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """A command inside the box (its namespaces and root), as root, in a clean environment."""
        if self.leader is None:
            raise RuntimeError("the box is not running")
        done = subprocess.run(
            [
                *("nsenter", "-t", str(self.leader), "-m", "-u", "-i", "-p", "-C", "-r", "-w"),
                *("env", "-i", f"PATH={PATH}", "LC_ALL=C.UTF-8", "SYSTEMD_COLORS=0"),
                *("SYSTEMD_PAGER=", "SYSTEMD_LOG_COLOR=0", *argv),
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} exited {done.returncode} in the box:\n{done.stdout}{done.stderr}"
            )
        return done

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def stop(self, timeout: float = 60.0) -> None:
        """Power the box off (SIGRTMIN+4 to its systemd), SIGKILL it if that takes too long."""
        if self._proc is not None:
            if self.leader is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.leader, signal.SIGRTMIN + 4)
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                # unshare --kill-child: its SIGKILL to the box's PID 1 ends the namespace.
                self._proc.kill()
                self._proc.wait(timeout=30)
            self._proc = None
            self.leader = None
        for cgroup in self._cgroups:
            remove_cgroup(cgroup)
        self._cgroups = []


def children(pid: int) -> list[int]:
    """The direct children of ``pid``."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    with contextlib.suppress(OSError):
        return [int(p) for p in path.read_text().split()]
    return []
