"""Publishing the fleet's names: RFC 2136 UPDATE signed with TSIG (``rfc2136``), and the
fake the engine's unit tests use (``fakepublisher``)."""
