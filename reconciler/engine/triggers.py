"""What starts a reconcile: the interval (with jitter), SIGHUP, the webhook and
commits to a local repo; and the queue that coalesces them.

One reconcile runs at a time. ``TriggerQueue`` remembers that *something*
asked for a run, not how many times: every trigger that arrives while a run
is in progress adds up to exactly one more run.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import watchfiles

log = logging.getLogger(__name__)


class TriggerQueue:
    """Pending reasons for a run; ``fire`` from any thread, ``take`` from the loop."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._reasons: list[str] = []

    def fire(self, reason: str) -> None:
        with self._cond:
            if reason not in self._reasons:
                self._reasons.append(reason)
            self._cond.notify_all()

    def take(self, timeout: float | None) -> tuple[str, ...]:
        """Wait up to ``timeout`` seconds for a trigger; return (and clear) every reason."""
        with self._cond:
            if not self._reasons:
                self._cond.wait(timeout)
            reasons = tuple(self._reasons)
            self._reasons.clear()
            return reasons

    @property
    def pending(self) -> bool:
        with self._cond:
            return bool(self._reasons)


class IntervalSchedule:
    """``interval`` seconds between runs, each wait varied by ``±jitter·interval``.

    ``random`` returns a float in [0, 1) and is injected so tests are exact.
    """

    def __init__(self, interval: float, jitter: float, *, random: Callable[[], float]) -> None:
        self._interval = interval
        self._jitter = jitter
        self._random = random

    def next_wait(self) -> float:
        return self._interval * (1 + self._jitter * (2 * self._random() - 1))


def install_signals(queue: TriggerQueue, stop: threading.Event) -> Callable[[], None]:
    """SIGHUP -> a run; SIGTERM/SIGINT -> stop. Returns a function restoring the old handlers.

    A handler runs on the main thread between two bytecodes, possibly while that
    thread holds the queue's lock; it therefore only starts a thread that does
    the work, so it never waits for a lock itself.
    """

    def hup(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=queue.fire, args=("SIGHUP",), daemon=True).start()

    def term(signum: int, frame: FrameType | None) -> None:
        def request_stop() -> None:
            log.info(
                "%s received: finishing the action in flight, then exiting.",
                signal.Signals(signum).name,
            )
            stop.set()
            queue.fire("stop")

        threading.Thread(target=request_stop, daemon=True).start()

    previous = {
        sig: signal.signal(sig, handler)
        for sig, handler in ((signal.SIGHUP, hup), (signal.SIGTERM, term), (signal.SIGINT, term))
    }

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def git_dir(path: Path) -> Path:
    """The git directory of a work tree (``.git``) or of a bare repository (itself)."""
    dot_git = path / ".git"
    if dot_git.is_file():
        pointer = dot_git.read_text(encoding="utf-8").strip().removeprefix("gitdir:").strip()
        return (path / pointer).resolve()
    return dot_git if dot_git.is_dir() else path


class RepoWatcher:
    """Fires when the watched branch of a repo on this machine gets a commit.

    The revision is a commit, so only the branch's ref matters: the watcher
    looks at ``refs/heads/<branch>`` and ``packed-refs`` inside the git
    directory and nothing else. The rest of ``.git/`` (objects, other
    branches such as the status branch the daemon itself pushes to) and the
    work tree (``.proxyfleet/`` and uncommitted edits alike) never trigger a
    run, so the daemon's own commits cannot start a loop.
    """

    def __init__(
        self,
        repo: Path,
        branch: str,
        fire: Callable[[str], None],
        stop: threading.Event,
        *,
        debounce_ms: int = 200,
    ) -> None:
        self._git_dir = git_dir(repo)
        self._wanted = {
            (self._git_dir / "refs" / "heads" / branch).resolve(),
            (self._git_dir / "packed-refs").resolve(),
        }
        self._fire = fire
        self._stop = stop
        self._debounce_ms = debounce_ms
        self._thread = threading.Thread(target=self._run, name="repo-watch", daemon=True)

    def wanted(self, change: watchfiles.Change, path: str) -> bool:
        return Path(path).resolve() in self._wanted

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        log.info("Watching %s for commits.", self._git_dir)
        try:
            for changes in watchfiles.watch(
                self._git_dir,
                watch_filter=self.wanted,
                stop_event=self._stop,
                debounce=self._debounce_ms,
                step=50,
                raise_interrupt=False,
            ):
                log.debug("Repo change: %s", sorted(p for _, p in changes))
                self._fire("commit")
        except (OSError, RuntimeError) as exc:
            log.warning("Watching %s stopped: %s", self._git_dir, exc)
