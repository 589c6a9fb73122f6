"""Step 5 of a cycle: carry a Plan out and say how each action went.

The executor never decides anything, and never looks anything up: the planner
did, and each typed action carries what it resolved. It runs the plan's
mutating actions (create, start, relabel, replace, delete, cleanup) in parallel across hosts,
at most ``per_host_concurrency`` at a time on one host (deletes: ``delete_concurrency``,
since a delete frees what it holds), and turns every
result, including a bug, into an ``ActionOutcome``. Keep, blocked and abandon
make no call at all.

- create: fetch the image into the local cache (once per run), make the host's
  base volume match it (once per host and image per run), then ``create``.
- start: ``start``.
- relabel: ``set_owner`` with the ownership record the plan carries (the one
  the VM was observed with, only ``protect`` changed).
- delete: ``delete``; a domain already gone counts as deleted. When the delete names
  a keeper (the VM the proxy keeps: the second step of a replace, or a duplicate), that
  VM must pass its health check first (``replace_timeout``), as in a replace:
  otherwise a replace that failed because its new VM never got healthy would lose
  the old, working VM one run later.
- cleanup: ``remove_volumes`` with the volumes the plan names; the host
  confirms first that their domain still does not exist and that no domain's
  disk uses them, and refuses (the action fails, nothing is deleted) otherwise.
  A cleanup without a domain is an unused base image: ``remove_unused_base``,
  which keeps (successfully) a base that a domain's disk chain still names.
- replace: create the new VM, wait until it has an IP and passes its health
  check (``replace_timeout``), and only then delete the old one. A new VM that
  never gets healthy leaves the old one running and the outcome failed.

Transient host errors are retried with backoff (reconciler.engine.retry);
permanent ones fail the action with their message. Once ``runtime.stop`` is
set, actions in flight finish and the rest are SKIPPED.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, TypeVar

from reconciler.adapters.hypervisor.host import Hypervisor
from reconciler.engine.check import Prober, VmHealth, await_healthy
from reconciler.engine.observe import ImageSizes
from reconciler.engine.once import OncePerRun
from reconciler.engine.retry import Attempts, call_with_retry
from reconciler.engine.runtime import Runtime
from reconciler.errors import HostError, NotFoundError
from reconciler.logfields import about, carry
from reconciler.model import Action, HealthCheck, Image, Plan
from reconciler.model.plan import MUTATING, Cleanup, Create, Delete, Relabel, Replace, Start
from reconciler.model.report import ActionOutcome, ActionResult
from reconciler.model.settings import ApplySettings
from reconciler.model.vm import MARKER_SUFFIX

log = logging.getLogger(__name__)

T = TypeVar("T")


class FetchedImage(Protocol):
    """A base image in the local cache, its checksum verified while downloading."""

    @property
    def path(self) -> Path: ...

    @property
    def sha256(self) -> str: ...


class ImageSource(ImageSizes, Protocol):
    """The local image cache (reconciler.adapters.hypervisor.download.ImageCache): ``fetch``
    here, ``size`` before planning (reconciler.engine.observe)."""

    def fetch(self, image: Image) -> FetchedImage: ...


class ActionFailed(Exception):
    """An action cannot go on; the message is the outcome's reason."""


class NotHealthy(ActionFailed):
    """A replace's new VM did not pass its health check in time: the rollout halts."""


class Executor:
    """Carries out one plan. Build one per run: its image memo lives for one run."""

    def __init__(
        self,
        hosts: Mapping[str, Hypervisor],
        *,
        images: ImageSource,
        prober: Prober,
        revision: str,
        settings: ApplySettings,
        runtime: Runtime,
    ) -> None:
        self._hosts = hosts
        self._images = images
        self._prober = prober
        self._revision = revision
        self._settings = settings
        self._runtime = runtime
        self._memo = OncePerRun()

    def run(self, plan: Plan) -> tuple[ActionOutcome, ...]:
        """One outcome per mutating action of ``plan``, in plan order.

        Rollout batches run one after the other: batch 1 with every other action,
        then each next batch only when no replace of an earlier one failed. Once
        one did, the later batches' replaces are SKIPPED: the rollout is halted.
        """
        actions = [a for a in plan.actions if a.kind in MUTATING]
        phases: dict[int, list[int]] = {}
        for index, action in enumerate(actions):
            phases.setdefault(_phase(action), []).append(index)
        results: dict[int, ActionOutcome] = {}
        stopped = ""
        for phase in sorted(phases):
            indexes = phases[phase]
            if stopped:
                for index in indexes:
                    results[index] = ActionOutcome(
                        actions[index],
                        ActionResult.SKIPPED,
                        error=f"not started: rollout halted ({stopped})",
                        attempts=0,
                    )
                continue
            results.update(self._run_phase(actions, indexes))
            stopped = next(
                (
                    f"{actions[i].proxy}'s replace failed in batch {phase}"
                    for i in indexes
                    if isinstance(actions[i], Replace)
                    and results[i].result is not ActionResult.SUCCEEDED
                ),
                "",
            )
        return tuple(results[i] for i in range(len(actions)))

    def _run_phase(self, actions: list[Action], indexes: list[int]) -> dict[int, ActionOutcome]:
        """The actions at ``indexes``, in parallel across hosts, bounded per host."""
        queues: dict[str, deque[int]] = {}
        for index in indexes:
            queues.setdefault(actions[index].host or "", deque()).append(index)
        results: dict[int, ActionOutcome] = {}
        width = max(1, self._settings.per_host_concurrency)
        delete_width = max(1, self._settings.delete_concurrency)
        slots = {
            host: (threading.BoundedSemaphore(width), threading.BoundedSemaphore(delete_width))
            for host in queues
        }
        workers = [
            (host, queue)
            for host, queue in sorted(queues.items())
            for _ in range(min(_width(actions, queue, width, delete_width), len(queue)))
        ]
        if not workers:
            return results
        lock = threading.Lock()

        def work(host: str, queue: deque[int]) -> None:
            others, deletes = slots[host]
            while True:
                with lock:
                    if not queue:
                        return
                    index = queue.popleft()
                with deletes if isinstance(actions[index], Delete) else others:
                    outcome = about(actions[index]).run(self._run_guarded, actions[index])
                self._runtime.progress.touch()
                with lock:
                    results[index] = outcome

        with ThreadPoolExecutor(len(workers), thread_name_prefix="apply") as pool:
            futures = [pool.submit(carry(work), host, queue) for host, queue in workers]
            for future in futures:
                future.result()
        return results

    # -- one action ---------------------------------------------------------------

    def _run_guarded(self, action: Action) -> ActionOutcome:
        if self._runtime.stop.is_set():
            return ActionOutcome(
                action,
                ActionResult.SKIPPED,
                error="not started: shutdown requested",
                attempts=0,
            )
        attempts = Attempts()
        started = self._runtime.monotonic()
        result, error, halts = ActionResult.SUCCEEDED, "", False
        try:
            self._run(action, attempts)
        except NotHealthy as exc:
            result, error, halts = ActionResult.FAILED, str(exc), True
            log.warning("%s failed its health gate: %s", _describe(action), error)
        except (ActionFailed, HostError) as exc:
            result, error = ActionResult.FAILED, str(exc)
            log.warning("%s failed: %s", _describe(action), error)
        except Exception as exc:  # a bug must not stop the other actions
            result, error = ActionResult.FAILED, f"{type(exc).__name__}: {exc}"
            log.error("%s failed unexpectedly: %s", _describe(action), error, exc_info=True)
        else:
            log.info("%s succeeded.", _describe(action))
        return ActionOutcome(
            action,
            result,
            error=error,
            attempts=1 + attempts.retries,
            duration_seconds=self._runtime.monotonic() - started,
            halts=halts,
        )

    def _run(self, action: Action, attempts: Attempts) -> None:
        host = self._host(action.host)
        domain = action.domain or ""
        match action:
            case Create():
                self._create(action, host, attempts)
            case Start():
                self._call(f"start {domain} on {host.name}", lambda: host.start(domain), attempts)
            case Relabel(owner=owner):
                self._call(
                    f"record protect={owner.protect} on {domain} on {host.name}",
                    lambda: host.set_owner(domain, owner),
                    attempts,
                )
            case Delete():
                self._wait_for_keeper(action)
                self._delete(host, domain, attempts)
            case Replace():
                self._replace(action, host, attempts)
            case Cleanup(domain=None):
                self._remove_base(action, host, attempts)
            case Cleanup():
                self._cleanup(action, host, attempts)
            case _:  # not reached: run() keeps only mutating actions
                raise ActionFailed(f"the executor does not carry out {action.kind} actions")

    def _create(self, action: Create | Replace, host: Hypervisor, attempts: Attempts) -> None:
        vm, domain = action.vm, action.domain or ""
        image = vm.image
        fetched = self._memo.get(
            ("fetch", image.key),
            lambda: self._call(
                f"fetch image {image.key}", lambda: self._images.fetch(image), attempts
            ),
        )
        self._memo.get(
            ("ensure", host.name, image.key),
            lambda: self._call(
                f"upload image {image.key} to {host.name}",
                lambda: host.ensure_image(image, fetched.path),
                attempts,
            ),
        )
        spec = vm.spec(
            domain=domain,
            digest=action.digest or "",
            image_sha256=fetched.sha256,
            revision=self._revision,
            created=self._runtime.clock().isoformat(timespec="seconds"),
        )
        self._call(f"create {domain} on {host.name}", lambda: host.create(spec), attempts)

    def _cleanup(self, action: Cleanup, host: Hypervisor, attempts: Attempts) -> None:
        domain = action.domain or ""
        if not action.volumes:
            raise ActionFailed("the plan's cleanup action names no volumes")
        deleted = self._call(
            f"remove unused volumes of {domain} on {host.name}",
            lambda: host.remove_volumes(domain, action.volumes),
            attempts,
        )
        gone = [v for v in action.volumes if v not in deleted]
        log.info(
            "Removed %s on %s%s.",
            ", ".join(deleted) or "nothing",
            host.name,
            f" ({', '.join(gone)} already gone)" if gone else "",
        )

    def _remove_base(self, action: Cleanup, host: Hypervisor, attempts: Attempts) -> None:
        """An unused base image and its marker; the host keeps it when a domain uses it."""
        if not action.volumes:
            raise ActionFailed("the plan's base cleanup names no volumes")
        base = action.volumes[0].removesuffix(MARKER_SUFFIX)
        deleted = self._call(
            f"remove unused base image {base} on {host.name}",
            lambda: host.remove_unused_base(base),
            attempts,
        )
        if deleted:
            log.info("Removed %s on %s.", ", ".join(deleted), host.name)
        else:
            log.info(
                "Kept base image %s on %s: something on the host still uses it.", base, host.name
            )

    def _replace(self, action: Replace, host: Hypervisor, attempts: Attempts) -> None:
        old, domain = action.replaces, action.domain or ""
        self._create(action, host, attempts)
        timeout = self._settings.replace_timeout
        checked, why = self._healthy(host, domain, action.vm.health)
        if not checked.found:
            raise ActionFailed(
                f"new VM {domain} on {host.name} was deleted by someone else while waiting "
                f"for its health check; old VM {old.domain} on {old.host} kept"
            )
        if why and not self._runtime.stop.is_set():
            raise NotHealthy(
                f"new VM {domain} did not become healthy within {timeout:.0f} s: {why}; "
                f"old VM {old.domain} on {old.host} kept"
            )
        if why:
            raise ActionFailed(
                f"new VM {domain} did not become healthy within {timeout:.0f} s: {why}; "
                f"old VM {old.domain} on {old.host} kept"
            )
        log.info("New VM %s is healthy at %s; deleting %s.", domain, checked.ip, old.domain)
        self._delete(self._host(old.host), old.domain, attempts)

    def _healthy(self, host: Hypervisor, domain: str, health: HealthCheck) -> tuple[VmHealth, str]:
        return await_healthy(
            host, domain, health, self._prober, settings=self._settings, runtime=self._runtime
        )

    def _wait_for_keeper(self, action: Delete) -> None:
        """For a delete of a VM whose proxy keeps another VM: that VM must be healthy first."""
        keeper, domain = action.keeper, action.domain
        if keeper is None or (keeper.host, keeper.domain) == (action.host, domain):
            return
        timeout = self._settings.replace_timeout
        checked, why = self._healthy(self._host(keeper.host), keeper.domain, keeper.health)
        if not checked.found:
            raise ActionFailed(
                f"{keeper.domain} on {keeper.host}, which stays for {action.proxy}, was deleted "
                f"by someone else while waiting for its health check; {domain} kept"
            )
        if why:
            raise ActionFailed(
                f"{keeper.domain} on {keeper.host}, which stays for {action.proxy}, did not "
                f"become healthy within {timeout:.0f} s: {why}; {domain} kept"
            )
        log.info(
            "VM %s on %s is healthy at %s; deleting %s.",
            keeper.domain,
            keeper.host,
            checked.ip,
            domain,
        )

    def _delete(self, host: Hypervisor, domain: str, attempts: Attempts) -> None:
        try:
            self._call(f"delete {domain} on {host.name}", lambda: host.delete(domain), attempts)
        except NotFoundError:
            log.info("Domain %s on %s was already gone.", domain, host.name)

    # -- helpers ------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T], attempts: Attempts) -> T:
        return call_with_retry(
            what, fn, settings=self._settings, runtime=self._runtime, attempts=attempts
        )

    def _host(self, name: str | None) -> Hypervisor:
        host = self._hosts.get(name or "")
        if host is None:
            raise ActionFailed(f"no connection to host {name!r}")
        return host


def _phase(action: Action) -> int:
    """The rollout batch an action runs in: a replace's own, 1 for everything else."""
    return action.batch if isinstance(action, Replace) else 1


def _describe(action: Action) -> str:
    target = f"{action.domain} on {action.host}"
    if isinstance(action, Replace):
        return f"Replace of {action.replaces.domain} by {target}"
    if isinstance(action, Cleanup):
        return f"Cleanup of {', '.join(action.volumes)} on {action.host}"
    return f"{action.kind.value.capitalize()} of {target}"


def _width(actions: list[Action], queue: deque[int], width: int, delete_width: int) -> int:
    """Workers for one host's queue: deletes may run ``delete_width`` at once, everything
    else ``width``; each kind is held to its own bound by a semaphore."""
    has_deletes = any(isinstance(actions[i], Delete) for i in queue)
    has_others = any(not isinstance(actions[i], Delete) for i in queue)
    return max(width if has_others else 1, delete_width if has_deletes else 1)
