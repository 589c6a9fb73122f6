"""The repo URL's credential, handed to git per command and kept in no file.

``repo.url`` may carry one (``https://user:token@git.example.org/fleet.git``).
Given to git as written, that URL is what ``git remote add`` stores in the
checkout's ``.git/config``: a file inside the daemon's checkout, which the
fleet repo's content once could name (a ``userDataFile`` of ``.git/config`` put
the token into a seed ISO, the hypervisor's pool and the guest). So:

- the remote stored in ``.git/config`` is the URL without its ``user:token@``
  (``public_url``);
- each git command gets the credential in its environment only: git's
  ``GIT_CONFIG_COUNT`` entries first clear every credential helper of the
  box's own git config (none may store the token, ``credential.helper=store``
  included), then name one inline helper, scoped to that URL (a redirect to
  another host gets nothing), that prints the user and token from two
  environment variables of the git process. Nothing is on argv, nothing is
  written to a file; the token lives in the daemon's memory and in its git
  children's environments, which only their user (and root) can read.

Only ``http://`` and ``https://`` URLs are split: an ssh URL's ``git@`` is a
user name for ssh, which takes its key from ``repo.sshKeyFile``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit, urlunsplit

from reconciler.errors import ConfigError

USER_VARIABLE = "PROXYFLEET_GIT_USERNAME"
TOKEN_VARIABLE = "PROXYFLEET_GIT_PASSWORD"

# git appends the operation ("get", "store", "erase"): only "get" answers.
_HELPER = (
    f'!f() {{ test "$1" = get && printf "username=%s\\npassword=%s\\n" '
    f'"${USER_VARIABLE}" "${TOKEN_VARIABLE}"; }}; f'
)


@dataclass(frozen=True, slots=True)
class Credential:
    """What the URL's userinfo said, percent-decoded; never shown (``repr`` included)."""

    username: str = field(repr=False)
    password: str = field(repr=False)


def split(url: str) -> tuple[str, Credential | None]:
    """The URL without its userinfo, and the credential it carried (None: none, or not http).

    ConfigError when the credential holds a line break (git's helper protocol is
    line-based, so it could not be handed over as written)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    credential = Credential(unquote(user), unquote(password))
    if any(c in value for value in (credential.username, credential.password) for c in "\r\n\0"):
        raise ConfigError("repo.url: its credential holds a line break; git cannot be given it")
    return urlunsplit(parts._replace(netloc=host)), credential


def public_url(url: str) -> str:
    """``url`` as it may be stored and shown: without a ``user:token@`` part."""
    return split(url)[0]


def environment(url: str) -> dict[str, str]:
    """Environment for git commands on ``url``: its credential, if any, through an inline
    helper scoped to the URL, and no credential helper of the box's git config."""
    public, credential = split(url)
    if credential is None:
        return {}
    return {
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "credential.helper",
        "GIT_CONFIG_VALUE_0": "",  # an empty value clears the helpers configured before it
        "GIT_CONFIG_KEY_1": f"credential.{public}.helper",
        "GIT_CONFIG_VALUE_1": _HELPER,
        USER_VARIABLE: credential.username,
        TOKEN_VARIABLE: credential.password,
    }
