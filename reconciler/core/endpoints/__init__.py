"""The endpoints of a fleet: the DNS names a run implies and the changes that publish them.

Pure: the RFC 2136 adapter (reconciler.adapters.dns) reads the zone and sends the update.
"""
