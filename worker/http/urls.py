"""URLs as Parley shows them: in log lines, error messages, metric labels. A URL may carry a credential (a password
in its user part, a token in its query string: MCP servers and gateways often take one there); every URL that is
shown goes through :func:`redact_url` first, and text that may hold URLs (an exception's message) through
:func:`redact_urls`."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

HIDDEN = "***"
# Enough to find URLs in an exception's message: a scheme, then anything up to a space or a quote.
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def redact_url(url: str) -> str:
    """``url`` with its user part (name and password) and its query string and fragment replaced by ``***``:
    ``https://***@mcp.example:8443/mcp?***``. The scheme, host, port and path stay, so a reader still knows which
    server it is. Something that does not parse as a URL is hidden whole."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return HIDDEN
    if not parts.scheme or not host:
        return HIDDEN
    user = f"{HIDDEN}@" if "@" in parts.netloc else ""
    where = f"[{host}]" if ":" in host else host
    query = f"?{HIDDEN}" if parts.query or parts.fragment else ""
    return f"{parts.scheme}://{user}{where}{f':{port}' if port else ''}{parts.path}{query}"


def redact_urls(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url`."""
    return _URL.sub(lambda m: redact_url(m.group(0)), text) if "://" in text else text
