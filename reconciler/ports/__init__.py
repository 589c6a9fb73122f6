"""The seams: every Protocol the engine uses, one module per seam.

The engine (reconciler.engine) imports these, the model and the core, never a concrete
adapter; the composition root (reconciler.cli.compose) builds the real adapters and
hands them in. Each module names its real adapter(s) and its one fake. Ports import
nothing but the model, the core and the errors (import contracts in pyproject.toml).

- ``hypervisor``: one libvirt host.          - ``source``: the fleet repo's checkout.
- ``status``: the status branch.             - ``locks``: the fleet lock.
- ``ring``: the fleet ring.                  - ``history``: what earlier runs saw.
- ``images``: the local image cache.         - ``imageurls``: the image URL rule.
- ``prober``: the proxy health probe.        - ``dns``: the proxies' DNS names.
- ``repoloader``: the repo on disk, loaded.  - ``metrics``: figures and /metrics.
- ``surface``: the HTTP endpoint.            - ``notifier``: systemd's sd_notify.
- ``board``: where a run's steps go.         - ``console``: a VM's serial console.

Two are not the engine's but the CLI's, built for it by the composition root as well:
``console`` (``proxyfleet console``) and ``metrics.DaemonMetrics`` (the daemon's wiring).
"""
