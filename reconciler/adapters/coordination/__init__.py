"""Coordination between actors: the fleet lock seam, tooz behind it, and its fake."""
