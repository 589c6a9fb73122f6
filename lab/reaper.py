"""Run a lab host's daemon under a process that reaps its orphans at once, as systemd does.

``python -m lab.reaper ARGV...`` makes itself a child subreaper
(``PR_SET_CHILD_SUBREAPER``), runs ``ARGV`` as its child, forwards SIGTERM, SIGINT and
SIGHUP to it, reaps every process that is reparented to it as soon as it exits, and exits
with the child's status when the child ends.

Why: libvirtd's QEMU processes daemonize, so their parent becomes the nearest subreaper,
or PID 1. On a hypervisor PID 1 is systemd, which reaps an exited QEMU at once. This
machine's PID 1 reaps orphans only every couple of seconds, and until then the exited
QEMU is a zombie that ``kill(pid, 0)`` still finds: libvirt's ``virDomainDestroy`` polls
exactly that (every 200 ms) and so took about 2 s per domain on every lab host, a cost of
the machine that no hypervisor has. libvirtd runs under this reaper on every lab host.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from types import FrameType

PR_SET_CHILD_SUBREAPER = 36
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


def run(argv: list[str]) -> int:
    """Run ``argv`` as the child; reap everything until it exits; its exit code."""
    become_subreaper()
    child = os.fork()
    if child == 0:  # pragma: no cover - replaced by exec
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"lab.reaper: cannot run {argv[0]}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: python -m lab.reaper ARGV...", file=sys.stderr)
        return 2
    return run(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
