"""The daemon's surface: HTTP endpoint, Prometheus metrics, sd_notify, the probe through a proxy."""
