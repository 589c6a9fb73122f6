"""The fleet's names on a real DNS server: RFC 2136 UPDATE, signed with TSIG (RFC 8945).

dnspython does the wire work. TSIG (a MAC over the message with the time signed, the
server's signed answer checked, BADKEY/BADSIG/BADTIME told apart) and UPDATE (zone,
prerequisite and update sections, value-dependent prerequisites) are protocols where an
almost-right implementation fails only against a real server, or fails open: not code
to write ourselves. dnspython is imported by this module and no other (import-linter).

One run:

1. **Read** the zone with one AXFR, signed with the same key, rather than a query per
   name. Under ``sync`` the publisher must find the names the fleet owns and no longer
   wants (a proxy deleted while the daemon was down, a renamed set): only a listing of
   the zone can, its TXT registry records telling ours from the rest. One transfer is
   one TCP connection whatever the fleet's size, where queries would cost three per
   name (A, AAAA, TXT). The zone must allow the transfer to the key
   (``allow-transfer { key NAME; }``), as external-dns's rfc2136 provider needs too.
2. **Decide** with the pure core: ``records.record_set`` then ``changes.diff``.
3. **Write** every change in ONE UPDATE message over TCP (200 proxies outgrow UDP),
   each change with its prerequisites: a new name must not exist, a changed or deleted
   one must still hold exactly the A, AAAA and TXT records read in step 1. So a
   concurrent edit (a person, a second daemon) fails the whole update (NXRRSET,
   YXDOMAIN) instead of being overwritten; the next run reads again.

Nothing is sent when nothing changed. Every failure is a ``DnsOutcome`` (FAILED, the
server's rcode), never an exception: DNS never stops VM reconciling. The TSIG secret is
read from its file at each run, handed to dnspython and to nothing else; no message
names it.
"""

from __future__ import annotations

import binascii
import logging
from collections.abc import Sequence
from pathlib import Path

import dns.exception
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdataset
import dns.rdatatype
import dns.tsig
import dns.update
import dns.xfr
import dns.zone

from reconciler.core.endpoints.changes import Change, Present, decide
from reconciler.core.endpoints.records import Endpoint, Member, registry_owner, registry_text
from reconciler.model.report import DnsOutcome, DnsResult
from reconciler.model.settings import DnsSettings

log = logging.getLogger(__name__)

_TYPES = {dns.rdatatype.A: "a", dns.rdatatype.AAAA: "aaaa", dns.rdatatype.TXT: "txt"}
_OURS = (dns.rdatatype.A, dns.rdatatype.AAAA, dns.rdatatype.TXT)


class Refused(Exception):
    """The server answered, and said no: ``rcode`` is its answer."""

    def __init__(self, rcode: str, message: str) -> None:
        super().__init__(message)
        self.rcode = rcode


class KeyUnusable(Exception):
    """The box's TSIG key cannot be used (no file, unreadable, not base64): nothing was sent."""


class Rfc2136Publisher:
    """Publishes the names of ``fleet`` into ``settings.zone`` on ``settings.server``."""

    def __init__(self, settings: DnsSettings) -> None:
        self.settings = settings
        host, _, port = settings.server.rpartition(":")
        self._host = host.strip("[]") or settings.server
        self._port = int(port) if port.isdigit() else 53
        self._zone = dns.name.from_text(settings.zone)

    def publish(self, fleet: str, members: Sequence[Member]) -> DnsOutcome:
        """Read the zone, send the changes: one AXFR and at most one UPDATE, each bounded by
        ``settings.timeout``. Never raises for the server's or the network's failures."""
        try:
            key = self._key()
            zone = self._read(key)
            found = decide(members, _present(zone), fleet=fleet, policy=self.settings.policy)
            for conflict in found.conflicts:
                log.warning("DNS name %s in zone %s", conflict, self.settings.zone)
            if found.changes:
                self._write(key, found.changes, read=zone, fleet=fleet)
                log.info(
                    "Published %d DNS change(s) to %s: %s.",
                    len(found.changes),
                    self.settings.server,
                    ", ".join(f"{c.op.value} {c.name}" for c in found.changes),
                )
        except Refused as exc:
            return self._failed(str(exc), reason="ServerRefused", rcode=exc.rcode)
        except KeyUnusable as exc:
            return self._failed(str(exc), reason="KeyUnusable")
        except (OSError, EOFError, dns.exception.DNSException) as exc:
            why = f"DNS server {self.settings.server} unreachable: {exc or type(exc).__name__}"
            return self._failed(why, reason="ServerUnreachable")
        result = DnsResult.PUBLISHED if found.changes else DnsResult.UNCHANGED
        return DnsOutcome(
            result=result,
            records=found.owned,
            changes=len(found.changes),
            conflicts=found.conflicts,
        )

    def _failed(self, why: str, *, reason: str, rcode: str = "") -> DnsOutcome:
        log.warning("Nothing published to DNS this run: %s.", why)
        return DnsOutcome(result=DnsResult.FAILED, reason=reason, rcode=rcode, error=why)

    def _key(self) -> dns.tsig.Key | None:
        tsig = self.settings.tsig
        if tsig is None:
            return None
        secret = _secret(tsig.secret_file)
        try:
            return dns.tsig.Key(tsig.name, secret, tsig.algorithm)
        except (binascii.Error, ValueError, dns.exception.DNSException) as exc:
            raise KeyUnusable(f"TSIG key {tsig.name} unusable: {type(exc).__name__}") from None

    def _read(self, key: dns.tsig.Key | None) -> dns.zone.Zone:
        """The zone as the server has it now (relative names)."""
        query = dns.message.make_query(self._zone, dns.rdatatype.AXFR)
        if key is not None:
            query.use_tsig(key)
        zone = dns.zone.Zone(self._zone, relativize=True)
        try:
            dns.query.inbound_xfr(
                self._host,
                zone,
                query=query,
                port=self._port,
                timeout=self.settings.timeout,
                lifetime=self.settings.timeout,
            )
        except dns.tsig.PeerError as exc:
            raise Refused(_peer_rcode(exc), f"zone transfer refused the key: {exc}") from None
        except dns.xfr.TransferError as exc:
            rcode = dns.rcode.to_text(exc.rcode)
            raise Refused(
                rcode, f"zone transfer of {self.settings.zone} refused: {rcode}"
            ) from None
        return zone

    def _write(
        self,
        key: dns.tsig.Key | None,
        changes: Sequence[Change],
        *,
        read: dns.zone.Zone,
        fleet: str,
    ) -> None:
        """Send ``changes`` in one UPDATE, each with the prerequisite that its name still
        holds what ``read`` (the transfer) had."""
        update = dns.update.UpdateMessage(self._zone)
        if key is not None:
            update.use_tsig(key)
        ttl = int(self.settings.ttl)
        for change in changes:
            name = dns.name.from_text(change.name, self._zone)
            held = {t: read.get_rdataset(change.name, t) for t in _OURS}
            _prerequisites(update, name, held if change.before is not None else None)
            if change.after is None:  # a delete: our records only, other TXT values stay
                update.delete(name, dns.rdatatype.A)
                update.delete(name, dns.rdatatype.AAAA)
                for rdata in held[dns.rdatatype.TXT] or ():
                    if registry_owner([_text(rdata)]) == fleet:
                        update.delete(name, rdata)
                continue
            _set(update, name, ttl, change.after)
            update.add(name, ttl, _txt(registry_text(fleet)))
        try:
            response = dns.query.tcp(
                update, self._host, port=self._port, timeout=self.settings.timeout
            )
        except dns.tsig.PeerError as exc:
            raise Refused(_peer_rcode(exc), f"update refused the key: {exc}") from None
        rcode = response.rcode()
        if rcode != dns.rcode.NOERROR:
            text = dns.rcode.to_text(rcode)
            raise Refused(text, f"update of {self.settings.zone} refused: {text}{_why(rcode)}")


def _secret(path: Path | None) -> str:
    if path is None:
        raise KeyUnusable("dns.tsig.secretFile is not set")
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise KeyUnusable(f"TSIG secret file {path} unreadable: {exc.strerror}") from None


def _present(zone: dns.zone.Zone) -> list[Present]:
    """Every name of the zone but its apex, with its A, AAAA and TXT values."""
    out = []
    for name, node in zone.nodes.items():
        if name == dns.name.empty:
            continue
        values: dict[str, tuple[str, ...]] = {}
        other = []
        for rdataset in node.rdatasets:
            field = _TYPES.get(rdataset.rdtype)
            if field is None:
                other.append(dns.rdatatype.to_text(rdataset.rdtype))
            elif field == "txt":
                values[field] = tuple(sorted(_text(r) for r in rdataset))
            else:
                values[field] = tuple(sorted(r.to_text() for r in rdataset))
        out.append(Present(name=name.to_text(), other=tuple(sorted(other)), **values))
    return sorted(out, key=lambda p: p.name)


def _prerequisites(
    update: dns.update.UpdateMessage,
    name: dns.name.Name,
    held: dict[dns.rdatatype.RdataType, dns.rdataset.Rdataset | None] | None,
) -> None:
    """The server must still hold what was read: nothing at all for a new name (``held``
    None); exactly the A, AAAA and TXT record sets read (or none of a type) otherwise."""
    if held is None:
        update.absent(name)
        return
    for rdtype, rdataset in held.items():
        if rdataset:
            update.present(name, *rdataset)  # rdata, not the set: a prerequisite has TTL 0
        else:
            update.absent(name, rdtype)


def _set(update: dns.update.UpdateMessage, name: dns.name.Name, ttl: int, after: Endpoint) -> None:
    for rdtype, values in ((dns.rdatatype.A, after.ipv4), (dns.rdatatype.AAAA, after.ipv6)):
        if values:
            update.replace(name, dns.rdataset.from_text(dns.rdataclass.IN, rdtype, ttl, *values))
        else:
            update.delete(name, rdtype)


def _text(rdata: dns.rdata.Rdata) -> str:
    """A TXT record's strings as one text (not UTF-8: replaced, never an exception)."""
    strings: tuple[bytes, ...] = getattr(rdata, "strings", ())
    return b"".join(strings).decode(errors="replace")


def _txt(text: str) -> dns.rdata.Rdata:
    quoted = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.TXT, quoted)


def _peer_rcode(exc: dns.tsig.PeerError) -> str:
    if isinstance(exc, dns.tsig.PeerBadKey):
        return "NOTAUTH (BADKEY)"
    if isinstance(exc, dns.tsig.PeerBadSignature):
        return "NOTAUTH (BADSIG)"
    if isinstance(exc, dns.tsig.PeerBadTime):
        return "NOTAUTH (BADTIME)"
    return "NOTAUTH"


def _why(rcode: dns.rcode.Rcode) -> str:
    if rcode in (dns.rcode.NXRRSET, dns.rcode.YXDOMAIN, dns.rcode.YXRRSET, dns.rcode.NXDOMAIN):
        return " (a name changed since it was read: the next run reads again)"
    return ""
