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
  VM is looked at once first and must pass its health check: the planner judged it
  healthy from the last run's check, and it may have failed since.
- cleanup: ``remove_volumes`` with the volumes the plan names; the host
  confirms first that their domain still does not exist and that no domain's
  disk uses them, and refuses (the action fails, nothing is deleted) otherwise.
  A cleanup without a domain is an unused base image: ``remove_unused_base``,
  which keeps (successfully) a base that a domain's disk chain still names.
- replace: create the new VM, and return. Nothing waits for it to boot: the
  old VM is deleted by a later run's plan once a check showed the new one
  healthy, and a new VM that passes none by its deadline halts the rollout
  (reconciler.core.plan.handover).

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
from typing import TypeVar

from reconciler.engine.check import check_vm
from reconciler.engine.once import OncePerRun
from reconciler.engine.retry import Attempts, call_with_retry
from reconciler.engine.runtime import Runtime
from reconciler.errors import HostError, NotFoundError
from reconciler.logfields import about, carry
from reconciler.model import Action, Plan
from reconciler.model.plan import (
    MUTATING,
    Cleanup,
    Create,
    Delete,
    Relabel,
    RemoveBase,
    Replace,
    Start,
)
from reconciler.model.report import ActionOutcome, ActionResult, Health
from reconciler.model.settings import ApplySettings
from reconciler.ports.hypervisor import Hypervisor
from reconciler.ports.images import ImageSource
from reconciler.ports.prober import Prober

log = logging.getLogger(__name__)

T = TypeVar("T")


class ActionFailed(Exception):
    """An action cannot go on; the message is the outcome's reason."""


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
        """One outcome per mutating action of ``plan``, in plan order."""
        actions = [a for a in plan.actions if a.kind in MUTATING]
        results = self._run_all(actions, list(range(len(actions))))
        return tuple(results[i] for i in range(len(actions)))

    def _run_all(self, actions: list[Action], indexes: list[int]) -> dict[int, ActionOutcome]:
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
                self._runtime.heartbeat.touch()
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
        result, error = ActionResult.SUCCEEDED, ""
        try:
            self._run(action, attempts)
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
                self._look_at_keeper(action)
                self._delete(host, domain, attempts)
            case Replace():
                self._create(action, host, attempts)
            case RemoveBase():
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

    def _remove_base(self, action: RemoveBase, host: Hypervisor, attempts: Attempts) -> None:
        """An unused base image and its marker; the host keeps it when a domain uses it."""
        base = action.base
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

    def _look_at_keeper(self, action: Delete) -> None:
        """For a delete of a VM whose proxy keeps another VM: that VM must pass its health
        check now (one look, no wait: the planner judged it healthy from the last run)."""
        keeper, domain = action.keeper, action.domain
        if keeper is None or (keeper.host, keeper.domain) == (action.host, domain):
            return
        checked = check_vm(
            self._host(keeper.host),
            keeper.domain,
            keeper.health,
            self._prober,
            wait=0.0,
            settings=self._settings,
            runtime=self._runtime,
        )
        if not checked.found:
            raise ActionFailed(
                f"{keeper.domain} on {keeper.host}, which stays for {action.proxy}, is gone; "
                f"{domain} kept"
            )
        if checked.health is not Health.HEALTHY:
            why = checked.detail or "no health check passed"
            raise ActionFailed(
                f"{keeper.domain} on {keeper.host}, which stays for {action.proxy}, failed its "
                f"health check: {why}; {domain} kept"
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


def _describe(action: Action) -> str:
    target = f"{action.domain} on {action.host}"
    if isinstance(action, Replace):
        return f"Replace of {action.replaces.domain} by {target}"
    if isinstance(action, Cleanup | RemoveBase):
        return f"Cleanup of {', '.join(action.volumes)} on {action.host}"
    return f"{action.kind.value.capitalize()} of {target}"


def _width(actions: list[Action], queue: deque[int], width: int, delete_width: int) -> int:
    """Workers for one host's queue: deletes may run ``delete_width`` at once, everything
    else ``width``; each kind is held to its own bound by a semaphore."""
    has_deletes = any(isinstance(actions[i], Delete) for i in queue)
    has_others = any(not isinstance(actions[i], Delete) for i in queue)
    return max(width if has_others else 1, delete_width if has_deletes else 1)
