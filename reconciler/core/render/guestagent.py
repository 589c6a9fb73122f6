"""The qemu-guest-agent bootstrap and how it travels as cloud-init vendor-data.

The seed first merged the bootstrap into each proxy's cloud-config and lost it
twice: cloud-init's default mergers keep the user-data value of any key both
sides define (a user ``packages:`` silently dropped ours), and re-rendering the
YAML changed the user's content. A vendor-data *shell script* avoids both:
cloud-init runs vendor scripts from ``cc_scripts_vendor`` with no merging, and
the user's user-data is never touched.

When the proxy also has its own ``vendorData``, both travel as one MIME
multipart. Our script is declared ``text/x-shellscript``. The user's part is
declared ``text/plain``: cloud-init's ``UserDataProcessor`` treats
``text/plain`` (its ``TYPE_NEEDED``) as "type unknown" and re-derives the type
from the payload's first line (``#!``, ``#cloud-config``, ``## template:
jinja``, ``#include`` ...), exactly as it would for a standalone vendor-data
document. So this code never classifies user content. Parts are base64 so
bytes and line endings survive unchanged.

A ``vendorData`` that is itself a MIME archive would not be re-sniffed inside
a text/plain part (cloud-init only unpacks top-level MIME); its leaf parts are
carried over with their own declared types instead, using the same
"mime-version: in the first 4096 bytes" test cloud-init applies.
"""

from __future__ import annotations

import email
import email.message
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

SCRIPT_FILENAME = "proxyfleet-qemu-guest-agent.sh"

# POSIX sh: Debian/Ubuntu (apt-get) first, then dnf, then yum. Idempotent: an
# agent already installed is only enabled and started. apt waits for a dpkg
# lock held by unattended-upgrades at first boot instead of failing.
GUEST_AGENT_SCRIPT = """#!/bin/sh
# proxyfleet: install and start qemu-guest-agent so the host can learn this
# VM's addresses. Safe to run more than once.
set -u
PKG=qemu-guest-agent

have_agent() {
    command -v qemu-ga >/dev/null 2>&1 || [ -x /usr/sbin/qemu-ga ] || [ -x /usr/bin/qemu-ga ]
}

install_agent() {
    if command -v apt-get >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        APT="apt-get -o DPkg::Lock::Timeout=300 -y -q"
        $APT install --no-install-recommends "$PKG" \\
            || { $APT update && $APT install --no-install-recommends "$PKG"; }
    elif command -v dnf >/dev/null 2>&1; then
        dnf -y install "$PKG"
    elif command -v yum >/dev/null 2>&1; then
        yum -y install "$PKG"
    else
        echo "proxyfleet: no apt-get, dnf or yum to install $PKG" >&2
        return 1
    fi
}

if ! have_agent; then
    install_agent || exit 1
fi

if command -v systemctl >/dev/null 2>&1; then
    # Debian's unit is static (started by udev on the virtio port), so
    # "enable" may refuse; starting it is what matters.
    systemctl enable --now "$PKG" 2>/dev/null || systemctl start "$PKG" || exit 1
elif command -v service >/dev/null 2>&1; then
    service "$PKG" start || exit 1
fi
exit 0
"""

# Fixed so the same inputs give the same vendor-data. It cannot collide with
# content we encode: those parts are base64, whose alphabet has no "-". Parts
# carried over from a user's MIME archive keep their own encoding, so then the
# email package picks a boundary it has checked against them.
BOUNDARY = "--proxyfleet-vendor-data-v1--"


def vendor_data(*, install_guest_agent: bool, user_vendor_data: str | None) -> bytes | None:
    """The seed's ``vendor-data`` file, or None when there is nothing to send."""
    if not install_guest_agent:
        return None if user_vendor_data is None else user_vendor_data.encode("utf-8")
    if user_vendor_data is None:
        return GUEST_AGENT_SCRIPT.encode("utf-8")
    return mime_multipart(GUEST_AGENT_SCRIPT, user_vendor_data).encode("utf-8")


def mime_multipart(script: str, user_vendor_data: str) -> str:
    """Our script first, then the user's vendor-data, as cloud-init reads MIME."""
    carried = _archive_leaves(user_vendor_data)
    message = MIMEMultipart(boundary=None if carried else BOUNDARY)
    agent = MIMEText(script, "x-shellscript", "utf-8")
    agent.add_header("Content-Disposition", "attachment", filename=SCRIPT_FILENAME)
    message.attach(agent)
    for part in carried or [MIMEText(user_vendor_data, "plain", "utf-8")]:
        message.attach(part)
    return message.as_string()


def _archive_leaves(user_vendor_data: str) -> list[email.message.Message]:
    """The leaf parts of a MIME archive (cloud-init's own test for one), else []."""
    if "mime-version:" not in user_vendor_data[:4096].lower():
        return []
    archive = email.message_from_string(user_vendor_data)
    return [p for p in archive.walk() if p.get_content_maintype() != "multipart"]
