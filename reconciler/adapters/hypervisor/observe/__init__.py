"""What a host holds, read in a few RPCs (``hostobserve``), and where a running guest
answers (``addresses``, with the host's ARP table in ``neighbours``)."""
