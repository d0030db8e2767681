"""URLs as respot records them: never with the credentials a researcher's tools put in them.

A git remote may carry a token (`https://user:TOKEN@host/org/repo.git`, `?private_token=...`)
and the job record, readable by every researcher (`respot status --json`), keeps what it is
given. `without_credentials` keeps the scheme, host, port and path, and drops the userinfo
(before `@`), the query and the fragment, for `scheme://` URLs and scp-like git remotes
(`user@host:org/repo.git`) alike.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

MAX_URL_CHARS = 2048
_SCP_LIKE = re.compile(r"(?P<user>[^@/:]+@)(?P<rest>[^/:]+:.*)", re.DOTALL)


def without_credentials(url: str) -> str:
    """`url` without userinfo, query or fragment (scp-like remotes: without `user@`)."""
    text = url.strip()
    if "://" in text:
        try:
            parts = urlsplit(text)
        except ValueError:  # e.g. a malformed IPv6 host: keep the scheme and nothing after it
            return text.split("://", 1)[0] + "://<unreadable>"
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))[:MAX_URL_CHARS]
    text = text.split("?", 1)[0].split("#", 1)[0]
    m = _SCP_LIKE.fullmatch(text)
    if m is not None:
        text = m.group("rest")
    return text[:MAX_URL_CHARS]


__all__ = ["MAX_URL_CHARS", "without_credentials"]
