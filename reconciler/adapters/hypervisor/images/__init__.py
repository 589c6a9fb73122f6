"""Images and volumes: the daemon's local image cache (``download``, ``imageurls``), and a
host's pool: its volumes looked up, written, read and deleted (``volumes``), base images
uploaded once and verified over them (``baseimage``, ``uploadstream``), volumes nobody
uses removed (``unusedvolumes``).

Other rooms use ``baseimage`` only.
"""
