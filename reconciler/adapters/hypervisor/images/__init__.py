"""Images and volumes: the daemon's local image cache (``download``, ``imageurls``), and a
host's pool: base images uploaded once and verified (``baseimage``, ``uploadstream``),
volumes nobody uses removed (``unusedvolumes``).

Other rooms use ``baseimage`` only.
"""
