"""``python tests/fakedaemon.py LOG``: the real Daemon around a fake cycle, as a process.

Each run writes what it does to LOG; a run has three "actions" of 0.3 s and
checks the stop flag before each, as the executor does.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from reports import report

from reconciler.adapters.surface.metrics import Metrics
from reconciler.adapters.surface.notify import SdNotify
from reconciler.engine.daemon import Daemon
from reconciler.model.report import RunReport
from reconciler.model.settings import DaemonSettings, ListenSettings


def main(log: Path) -> int:
    runs = [0]

    def write(line: str) -> None:
        with log.open("a") as fh:
            fh.write(line + "\n")

    def cycle(stop: threading.Event) -> RunReport:
        runs[0] += 1
        n = runs[0]
        for action in (1, 2, 3):
            if stop.is_set():
                write(f"run {n} skipped {action}")
                break
            write(f"run {n} action {action} start")
            time.sleep(0.3)
            write(f"run {n} action {action} done")
        write(f"run {n} end")
        return report(minute=n)

    settings = DaemonSettings(
        interval=3600, listen=ListenSettings("127.0.0.1", 0), state_dir=log.parent
    )
    daemon = Daemon(settings, cycle, metrics=Metrics(), notifier=SdNotify())
    code = daemon.run()
    write(f"exit {code}")
    return code


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
