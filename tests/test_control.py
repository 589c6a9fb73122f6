"""The control socket (``reconcile``, ``get``, ``info``): the run board, the daemon's answers
over a real unix socket, root-only access, and the commands' output and exit codes."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import stat
import threading
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from daemonutil import FakeCycle, real_daemon, running, wait_until
from reports import REV2, T0, report

from reconciler.adapters.surface.controlsocket import ControlServer, peer_uid, request, socket_path
from reconciler.cli import main
from reconciler.engine.control import Control, Finished, RunBoard, picture
from reconciler.engine.daemon import Daemon
from reconciler.engine.observe import Observation
from reconciler.errors import ControlError
from reconciler.model import Domain, DomainState, HostInventory, Inventory, Owner
from reconciler.model.history import History, VmRecord
from reconciler.model.plan import DomainRef
from reconciler.model.report import Health, RunReport, RunResult
from reconciler.model.settings import DaemonSettings, ListenSettings

DOMAIN = "pf-f-web-1-0123abcd"


@pytest.fixture
def settings(tmp_path: Path) -> DaemonSettings:
    return DaemonSettings(
        interval=3600, listen=ListenSettings("127.0.0.1", 0), state_dir=tmp_path / "state"
    )


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # tmp_path can be longer than a unix socket path may be (108 bytes).
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pf-ctl-") as name:
        yield Path(name)


def serve(daemon: Daemon, path: Path, **kw: Any) -> ControlServer:
    control = Control(daemon.runs, reports=lambda: daemon.reports, role=lambda: "", **kw)
    server = ControlServer(path, control.handle)
    server.start()
    return server


# -- the run board ------------------------------------------------------------


def test_a_request_is_answered_by_the_first_run_that_starts_after_it() -> None:
    fired: list[str] = []
    board = RunBoard(lambda: fired.append("reconcile"))
    running_run = board.start()  # a run is going when the request comes
    ticket = board.ask()
    assert fired == ["reconcile"]
    board.finish(Finished(running_run, report(minute=1), ""))
    assert board.wait(ticket, timeout=0.05) is None  # that run may have fetched before
    nxt = board.start()
    board.finish(Finished(nxt, report(minute=2), ""))
    answered = board.wait(ticket, timeout=1)
    assert answered is not None and answered.number == nxt


def test_waiters_are_released_when_the_daemon_stops() -> None:
    board = RunBoard(lambda: None)
    ticket = board.ask()
    threading.Timer(0.1, board.close).start()
    assert board.wait(ticket, timeout=5) is None


# -- the daemon's answers over a real socket ----------------------------------


def test_reconcile_queues_a_run_and_answers_with_that_runs_outcome(
    settings: DaemonSettings, sock_dir: Path
) -> None:
    cycle = FakeCycle()
    daemon = real_daemon(settings, cycle)
    path = sock_dir / "control.sock"
    with running(daemon):
        assert wait_until(lambda: cycle.calls == 1)
        server = serve(daemon, path)
        try:
            answers = list(request(path, {"command": "reconcile"}, timeout=10))
        finally:
            server.stop()
    assert cycle.calls == 2
    assert [a["event"] for a in answers] == ["queued", "finished"]
    run = answers[1]["run"]
    assert run["result"] == "success" and run["revision"] == report(minute=2).revision
    assert run["finished"] == "2026-11-30T12:02:04Z"  # the second run's, not the first's
    assert not path.exists()  # the server removes its socket when it stops


def test_a_standby_daemon_answers_reconcile_get_and_info_naming_the_leader(
    settings: DaemonSettings, sock_dir: Path
) -> None:
    role = "standby for fleet home, led by daemon on box-a (pid 7)"
    daemon = real_daemon(settings, lambda stop: None)
    path = sock_dir / "control.sock"
    control = Control(
        daemon.runs, reports=lambda: daemon.reports, role=lambda: role, standby=lambda: True
    )
    server = ControlServer(path, control.handle)
    server.start()
    try:
        with running(daemon):
            answers = list(request(path, {"command": "reconcile"}, timeout=10))
            got = list(request(path, {"command": "get"}, timeout=10))
            info = list(request(path, {"command": "info", "name": "web-1"}, timeout=10))
    finally:
        server.stop()
    assert answers[-1]["event"] == "standby"
    assert "led by daemon on box-a" in answers[-1]["role"]
    assert got == [{"standby": True, "role": role}] == info


def test_get_answers_from_the_last_runs_and_keeps_the_picture_over_a_stalled_run() -> None:
    good = report(minute=1)
    stalled = RunReport(
        started=T0 + timedelta(minutes=2),
        finished=T0 + timedelta(minutes=3),
        result=RunResult.STALLED,
        revision=REV2,
        problems=("fleet.yaml:3:1: spec: broken",),
    )
    control = Control(RunBoard(lambda: None), reports=lambda: [good, stalled], role=lambda: "")
    doc = control.get()["status"]
    assert [p["name"] for p in doc["proxies"]] == ["web-1"]
    assert doc["observedRevision"] == REV2
    assert [r["result"] for r in doc["runs"]] == ["stalled", "success"]
    assert picture([]) is None


def test_info_tells_vm_provenance_history_and_health_in_each_run() -> None:
    first = report(minute=1, health=Health.UNHEALTHY)
    second = report(minute=2)
    owner = Owner(
        "f", "web-1", "d" * 64, image_key="debian-12", image_sha256="ab" * 32,
        revision="c" * 40, created="2026-11-30T11:58:00+00:00",
    )  # fmt: skip
    inventory = Inventory(
        (HostInventory("kvm-a", True, (Domain(DOMAIN, DomainState.RUNNING, owner),)),)
    )
    restart = T0 + timedelta(seconds=30)
    history = History(vms=((DomainRef("kvm-a", DOMAIN), VmRecord(None, True, (restart,))),))
    control = Control(
        RunBoard(lambda: None),
        reports=lambda: [first, second],
        role=lambda: "leader of fleet f",
        history=lambda: history,
        observed=lambda: Observation(inventory=inventory, hosts=(), fleet="f"),
    )
    info = control.info("web-1")
    assert info["proxy"]["domain"] == DOMAIN and info["proxy"]["ip"] == "10.0.0.5"
    assert info["provenance"]["revision"] == "c" * 40
    assert info["provenance"]["created"] == "2026-11-30T11:58:00+00:00"
    assert info["provenance"]["image"] == "debian-12"
    assert info["history"] == {
        "failingSince": None,
        "healthyOnce": True,
        "healthySince": None,
        "restarts": ["2026-11-30T12:00:30Z"],
    }
    assert [r["health"] for r in info["runs"]] == ["healthy", "unhealthy"]
    assert "no proxy web-9" in control.info("web-9")["error"]


def test_a_vm_made_by_the_last_run_takes_its_provenance_from_that_run() -> None:
    made = report(minute=1, created=True)
    control = Control(RunBoard(lambda: None), reports=lambda: [made], role=lambda: "")
    assert control.info("web-1")["provenance"]["revision"] == made.revision


def test_a_request_that_is_not_a_json_command_is_refused_with_a_reason(sock_dir: Path) -> None:
    path = sock_dir / "control.sock"
    control = Control(RunBoard(lambda: None), reports=lambda: [], role=lambda: "")
    server = ControlServer(path, control.handle)
    server.start()
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))
            client.sendall(b"GET / HTTP/1.0\r\n\r\n")
            line = client.makefile("rb").readline()
        assert json.loads(line)["error"].startswith("bad request")
        with pytest.raises(ControlError, match="unknown command 'drop'"):
            list(request(path, {"command": "drop"}, timeout=5))
    finally:
        server.stop()


# -- root only ------------------------------------------------------------------


def test_the_socket_is_mode_0600_and_a_peer_of_another_uid_is_refused(sock_dir: Path) -> None:
    path = sock_dir / "control.sock"
    control = Control(RunBoard(lambda: None), reports=lambda: [], role=lambda: "")
    # Allowing only a uid that is not ours makes this process the "other user".
    server = ControlServer(path, control.handle, allowed_uids=frozenset({os.geteuid() + 4242}))
    server.start()
    try:
        info = path.lstat()
        assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
        assert info.st_uid == os.geteuid()
        with pytest.raises(ControlError, match=f"refused: uid {os.geteuid()} may not"):
            list(request(path, {"command": "get"}, timeout=5))
    finally:
        server.stop()


NOBODY = 65534


def ask_as(uid: int, path: Path) -> str:
    """What a process running as ``uid`` gets from the socket: the answer line, or the
    error of its connect (a forked child; the venv's interpreter is not for other users)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to uid, ask, report, exit without cleanup
        try:
            os.setgid(uid)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX) as client:
                client.settimeout(10)
                client.connect(str(path))
                with contextlib.suppress(BrokenPipeError):  # refused before it was read
                    client.sendall(b'{"command": "get"}\n')
                answer = client.makefile("rb").readline()
        except OSError as exc:
            answer = f"{type(exc).__name__}".encode()
        os.write(write_end, answer)
        os._exit(0)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with os.fdopen(read_end, "rb") as pipe:
        return pipe.read().decode().strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
def test_a_user_other_than_root_is_kept_out_by_the_file_mode_and_then_by_peer_credentials(
    sock_dir: Path,
) -> None:
    sock_dir.chmod(0o755)
    path = sock_dir / "control.sock"
    control = Control(RunBoard(lambda: None), reports=lambda: [], role=lambda: "")
    server = ControlServer(path, control.handle)
    server.start()
    try:
        assert ask_as(NOBODY, path) == "PermissionError"  # mode 0600, owned by root
        path.chmod(0o666)  # past the file mode, the peer check still refuses
        refused = json.loads(ask_as(NOBODY, path))
        assert refused == {"error": f"refused: uid {NOBODY} may not use the control socket"}
        assert "status" in json.loads(ask_as(0, path))  # root is served
    finally:
        server.stop()


def test_peer_credentials_name_the_connecting_process_uid() -> None:
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        assert peer_uid(left) == os.geteuid()


def test_a_live_socket_is_not_taken_over_and_a_stale_one_is_replaced(sock_dir: Path) -> None:
    path = sock_dir / "control.sock"
    control = Control(RunBoard(lambda: None), reports=lambda: [], role=lambda: "")
    first = ControlServer(path, control.handle)
    first.start()
    try:
        with pytest.raises(OSError, match="another daemon answers"):
            ControlServer(path, control.handle)
    finally:
        first.stop()
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # a socket file nobody listens on: a daemon that died
    second = ControlServer(path, control.handle)
    second.stop()
    path.write_text("not a socket")
    with pytest.raises(OSError, match="is not a socket"):
        ControlServer(path, control.handle)


# -- the commands -----------------------------------------------------------------


class Scripted:
    """A control server answering each command with fixed lines."""

    def __init__(self, path: Path, answers: Mapping[str, list[dict[str, Any]]]) -> None:
        self.requests: list[Mapping[str, Any]] = []

        def handle(req: Mapping[str, Any], reply: Any) -> None:
            self.requests.append(req)
            for answer in answers[str(req["command"])]:
                reply(answer)

        self.server = ControlServer(path, handle)
        self.server.start()


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_reconcile_prints_the_run_and_exits_by_its_result(
    sock_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from reconciler.engine.control import run_summary

    path = sock_dir / "control.sock"
    ok = run_summary(report(minute=1, created=True))
    partial = run_summary(report(minute=2, result=RunResult.PARTIAL, blocked=True))
    for run, expected in ((ok, 0), (partial, 3)):
        queued = {"event": "queued", "runningNow": True}
        scripted = Scripted(path, {"reconcile": [queued, {"event": "finished", "run": run}]})
        try:
            code, out, err = cli(capsys, "reconcile", "--socket", str(path))
        finally:
            scripted.server.stop()
        assert code == expected, out + err
        assert "a run is going; yours is the next one" in err
    assert "Run partial at 111111111111 in 4.0s: not Ready (ActionsFailed); 1/1" in out
    assert "blocked: old-1: deletes beyond maxDeletesPerRun (1)" in out


def test_reconcile_on_a_standby_exits_4_naming_the_leader(
    sock_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sock_dir / "control.sock"
    role = "standby for fleet home, led by daemon on box-a (pid 7)"
    scripted = Scripted(
        path, {"reconcile": [{"event": "queued"}, {"event": "standby", "role": role}]}
    )
    try:
        code, _, err = cli(capsys, "reconcile", "--socket", str(path))
    finally:
        scripted.server.stop()
    assert code == 4
    assert f"stands by ({role})" in err


def test_without_a_daemon_the_commands_say_so_and_exit_1(
    sock_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in (["reconcile"], ["get"], ["info", "web-1"]):
        code, out, err = cli(capsys, *command, "--state-dir", str(sock_dir))
        assert code == 1 and out == ""
        assert f"no daemon control socket at {socket_path(sock_dir)}; is proxyfleet run up?" in err


def test_get_prints_proxies_and_hosts_and_json_the_daemons_answer(
    sock_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sock_dir / "control.sock"
    last = report(minute=1, reachable=False)
    control = Control(
        RunBoard(lambda: None), reports=lambda: [last], role=lambda: "leader of fleet f"
    )
    server = ControlServer(path, control.handle)
    server.start()
    try:
        code, out, _ = cli(capsys, "get", "--socket", str(path))
        assert code == 0
        lines = out.splitlines()
        assert (
            lines[0]
            == "As of the daemon's last run, finished 2026-11-30T12:01:04Z at 111111111111."
        )
        assert lines[1] == "Daemon: leader of fleet f."
        assert any(
            line.split()[:6] == ["web-1", "east", "kvm-a", "running", "10.0.0.5", "healthy"]
            for line in lines
        ), out
        assert any(
            line.split()[:3] == ["kvm-b", "west", "NO"] and "ssh: refused" in line for line in lines
        ), out
        code, out, _ = cli(capsys, "get", "--socket", str(path), "--json")
        assert code == 0
        assert json.loads(out)["status"]["proxies"][0]["domain"] == DOMAIN
    finally:
        server.stop()


def test_info_prints_one_proxy_and_exits_1_for_an_unknown_one(
    sock_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sock_dir / "control.sock"
    control = Control(
        RunBoard(lambda: None), reports=lambda: [report(minute=1, created=True)], role=lambda: ""
    )
    server = ControlServer(path, control.handle)
    server.start()
    try:
        code, out, _ = cli(capsys, "info", "web-1", "--socket", str(path))
        assert code == 0
        assert f"VM:            {DOMAIN}" in out
        assert "From commit:   " + "1" * 40 in out
        assert "Health in the daemon's last runs (newest first):" in out
        code, out, err = cli(capsys, "info", "web-9", "--socket", str(path))
        assert code == 1 and "no proxy web-9" in err
    finally:
        server.stop()


def test_reconcile_timeout_takes_durations(capsys: pytest.CaptureFixture[str]) -> None:
    from reconciler.cli.controlclient import duration

    assert duration("90") == 90 and duration("5m") == 300 and duration("1h") == 3600
    with pytest.raises(argparse.ArgumentTypeError):
        duration("soon")


def test_reconcile_gives_up_after_its_timeout_and_says_the_run_goes_on(
    sock_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sock_dir / "control.sock"
    release = threading.Event()

    def slow(req: Mapping[str, Any], reply: Any) -> None:
        reply({"event": "queued", "runningNow": False})
        release.wait(10)

    server = ControlServer(path, slow)
    server.start()
    try:
        code, out, err = cli(capsys, "reconcile", "--socket", str(path), "--timeout", "0.5")
    finally:
        release.set()
        server.stop()
    assert code == 1 and out == ""
    assert "no answer from the daemon in time (a run it started goes on)" in err


def test_a_state_dir_too_deep_for_a_socket_path_still_gets_its_control_socket(
    tmp_path: Path,
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = deep / "control.sock"
    assert len(str(path)) > 108
    control = Control(RunBoard(lambda: None), reports=lambda: [], role=lambda: "")
    server = ControlServer(path, control.handle)
    server.start()
    try:
        assert stat.S_ISSOCK(path.lstat().st_mode)
        assert list(request(path, {"command": "get"}, timeout=5)) == [
            {"role": "", "reconciling": False, "status": None}
        ]
    finally:
        server.stop()
    assert not path.exists()
