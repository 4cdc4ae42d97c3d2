"""How the hub shows what it holds: a source URL's password and secret query values hidden (wherever it is shown
or logged), and numbers that strict JSON can carry.

    redact("rtsp://me:pw@cam.example/s?token=abc")   # "rtsp://me:***@cam.example/s?token=***"
    finite({"score": float("nan")})                  # {"score": None}

The source itself is opened with the URL as given.
"""

from __future__ import annotations

import math
import re

HIDDEN = "***"  # what a URL's password and secret query values are shown as
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\"<>]*")
# query parameters whose values are secrets: tokens, keys, passwords, signatures (AWS X-Amz-Signature, Azure sig)
_SECRET_PARAM = re.compile(r"(?i)token|secret|passw|pwd|apikey|api[-_]key|signature|credential|auth|^(key|sig|pass)$")


def redact(text: str) -> str:
    """`text` with the password of every URL in it (`rtsp://user:***@host/...`) and the values of its secret query
    parameters (token, key, password, secret, sig, ...) shown as ***."""
    return _URL.sub(lambda m: _redact_url(m.group(0)), text) if isinstance(text, str) and "://" in text else text


def _redact_url(url: str) -> str:
    scheme, _, rest = url.partition("://")
    netloc_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, tail = rest[:netloc_end], rest[netloc_end:]
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.partition(':')[0]}:{HIDDEN}@{host}"
    path, q, query = tail.partition("?")
    if q:
        query, hash_, fragment = query.partition("#")
        pairs = []
        for pair in query.split("&"):
            name, eq, value = pair.partition("=")
            pairs.append(f"{name}={HIDDEN}" if eq and value and _SECRET_PARAM.search(name) else pair)
        tail = f"{path}?{'&'.join(pairs)}{hash_}{fragment}"
    return f"{scheme}://{netloc}{tail}"


def finite(obj):
    """`obj` with every NaN or infinite float replaced by None (containers copied), for strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", None) == 0:  # a numpy scalar
        return finite(obj.item())
    return obj
