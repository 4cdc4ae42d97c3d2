"""Which hosts a URL source may reach, and an HTTP(S) reader that PyAV opens every resource of a stream through.

    guard = UrlGuard()                       # public hosts only; UrlGuard(check_address=...) to decide otherwise
    guard.check("rtsp://camera.example/s")   # AddressRefused when the host resolves to a non-public address
    target, kwargs = guard.prepare(url)      # checks (and for http(s) fetches) the URL now
    container = av.open(target, **kwargs)

`public_address(host, port)` resolves a host with `socket.getaddrinfo` and refuses it when ANY address it resolves
to is loopback, link-local, private, multicast, unspecified, reserved or otherwise not global (an IPv4 address
inside an IPv4-mapped, 6to4 or Teredo IPv6 address counts as itself). The refusal is one line naming the host and
the kind of address, and never depends on whether anything listens there.

HTTP(S) URLs are not fetched by ffmpeg's http protocol: `prepare` hands PyAV an `io_open` callable, through which
ffmpeg opens the URL itself and every nested resource a demuxer opens with `io_open` (HLS variant playlists,
segments, keys, init sections). Each is fetched by `HttpReader`, which checks the host first, connects to the
checked address (so a second DNS answer cannot differ from the checked one), and follows redirects itself, at most
`max_redirects`, checking every hop; ffmpeg's own redirect following (in its http protocol, which only a
`max_redirects` option limits) never runs. The top-level URL is fetched before PyAV sees it, so PyAV opens the final
URL of its redirects (its extension, or the Content-Type, names the format). Only http and https resources are
opened; HLS's `crypto+` (AES-128 segments) and `data:` resources are refused. ffmpeg may use no protocol of its own
(an empty `protocol_whitelist`), so what a demuxer opens without `io_open` fails instead of going out: DASH
segments (libavformat/dashdec.c opens them with ffio_open_whitelist), the RTP streams an SDP file names.

RTSP and RTMP URLs are opened by ffmpeg itself: their host is checked before every open, and RTSP is held to TCP
(the server cannot choose where RTP/UDP packets go). Their protocol-level redirects (RTSP 3xx replies, RTMP
connect redirects) are followed inside ffmpeg, where no hook sees them.

Thread contract: a `UrlGuard` is immutable; `check` and `prepare` may be called from any thread. An
`HttpReader` is used by the one thread that decodes its container.
"""

from __future__ import annotations

import base64
import functools
import http.client
import ipaddress
import socket
import ssl
from collections.abc import Callable
from urllib.parse import unquote, urljoin, urlsplit

HTTP_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443, "rtsp": 554, "rtsps": 322, "rtmp": 1935, "rtmps": 443}
MAX_REDIRECTS = 5
SHORT_SEEK_BYTES = 1 << 16  # a forward seek up to this far reads on instead of making a new request
MAX_SKIP_BYTES = 64 << 20  # a server that ignores Range is read through at most this far to reach an offset
USER_AGENT = "streamvid"
# demuxers for a Content-Type, where a redirected or extension-less URL would not name its format
MIME_FORMATS = {"application/vnd.apple.mpegurl": "hls", "application/x-mpegurl": "hls", "audio/mpegurl": "hls",
                "audio/x-mpegurl": "hls"}
AVIO_FLAG_WRITE = 2


class AddressRefused(ValueError):
    """A URL whose host the guard does not allow, or a resource it does not open; the message says why."""


def is_loopback(host: str) -> bool:
    """A bind address that only this machine reaches: "localhost", 127.0.0.0/8, ::1 (where servers may run without
    credentials)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def address_kind(address: str) -> str | None:
    """What makes `address` non-public ("loopback", "private", ...), or None for a public address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone ("fe80::1%eth0")
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if inner is not None:
            return address_kind(str(inner))
    for kind in ("loopback", "link_local", "multicast", "unspecified", "reserved", "private"):
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if ip.is_global else "non-global"


def public_address(host: str, port: int) -> str:
    """The address to connect to for `host`: its first resolved address, when every resolved address is public;
    AddressRefused otherwise (or when it does not resolve)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise AddressRefused(f"cannot resolve host {host!r}") from None
    addresses = [info[4][0] for info in infos]
    for address in addresses:
        kind = address_kind(address)
        if kind is not None:
            named = host if host == address else f"{host} ({address})"
            article = "an" if kind[0] in "aeiou" else "a"
            raise AddressRefused(f"{named} is {article} {kind} address: URLs may only reach public hosts "
                                 f"(--allow-private-urls)")
    if not addresses:
        raise AddressRefused(f"cannot resolve host {host!r}")
    return addresses[0]


def split_host(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a network URL; AddressRefused when it has no usable host."""
    if any(c.isspace() or ord(c) < 32 or c == "\\" for c in url):
        raise AddressRefused("a URL must not contain spaces, control characters or backslashes")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number in 0..65535
        raise AddressRefused(f"a {scheme} URL with an invalid port") from None
    if not host:
        raise AddressRefused(f"a {scheme or 'network'} URL must name a host")
    return scheme, host, port or DEFAULT_PORTS.get(scheme, 0)


class UrlGuard:
    """Checks the hosts of URL sources; see the module docstring. `check_address(host, port)` returns the address
    to connect to or raises AddressRefused (default: `public_address`; a test or a deployment may pass its own)."""

    def __init__(self, check_address: Callable[[str, int], str] = public_address, timeout_s: float = 10.0,
                 read_timeout_s: float = 5.0, max_redirects: int = MAX_REDIRECTS) -> None:
        self.check_address = check_address
        self.timeout_s, self.read_timeout_s, self.max_redirects = timeout_s, read_timeout_s, max_redirects

    def check(self, url: str) -> str:
        """The address `url`'s host may be reached at; AddressRefused when it may not."""
        _, host, port = split_host(url)
        return self.check_address(host, port)

    def prepare(self, url: str) -> tuple[str, dict]:
        """(target, keyword arguments) for `av.open(target, ...)`; AddressRefused, or OSError when an http(s) URL
        does not answer. rtsp/rtmp: the host is checked now and the URL is opened by ffmpeg (RTSP over TCP). http(s):
        the URL is fetched now, its redirects followed and checked, and the target is the final URL, opened through
        an `io_open` that hands PyAV that response and fetches every nested resource through `HttpReader`."""
        scheme = split_host(url)[0]
        if scheme not in HTTP_SCHEMES:
            self.check(url)
            return url, {"options": {"rtsp_transport": "tcp"} if scheme.startswith("rtsp") else {}}
        first = self.open_http(url)
        mime = (first.content_type or "").split(";", 1)[0].strip().lower()
        # http_persistent=0: HLS would otherwise reuse a segment's connection with ffmpeg's http protocol, which a
        # Python-opened resource does not have (libavformat/hls.c asserts on it). An empty protocol whitelist
        # leaves ffmpeg no protocol of its own to open anything with.
        return first.url, {"io_open": NestedOpener(self, first), "format": MIME_FORMATS.get(mime),
                           "options": {"http_persistent": "0", "protocol_whitelist": ""}}

    def open_http(self, url: str, offset: int = 0, end: int | None = None) -> HttpReader:
        return HttpReader(url, self, offset, end)


class NestedOpener:
    """PyAV's `io_open` for one container: its first call gets `first` (the top-level URL's open response), later
    ones open each nested resource with `HttpReader`. A refused resource raises AddressRefused, which PyAV
    re-raises from the container's next call. After that, and after a nested resource fails to open (a missing
    segment), it returns an empty file, which the demuxer skips like a failed segment."""

    def __init__(self, guard: UrlGuard, first: HttpReader | None = None) -> None:
        self.guard, self.first = guard, first
        self.calls = 0
        self.refused: AddressRefused | None = None

    def __call__(self, url: str, flags: int, options: dict):
        self.calls += 1
        first, self.first = self.first, None
        if first is not None and self.calls == 1 and url == first.url and not options.get("offset"):
            return first
        if first is not None:
            first.close()
        if self.refused is not None:
            return EmptyFile()
        try:
            if flags & AVIO_FLAG_WRITE:
                raise AddressRefused("a URL source may not write anything")
            scheme = urlsplit(url).scheme.lower()
            if scheme not in HTTP_SCHEMES:
                raise AddressRefused(f"the stream names a {scheme or 'local'!r} resource, which is not opened")
            offset, end = int(options.get("offset") or 0), int(options.get("end_offset") or 0) or None
            return self.guard.open_http(url, offset, end)
        except AddressRefused as e:
            self.refused = e
            raise
        except OSError:
            if self.calls == 1:
                raise
            return EmptyFile()


class EmptyFile:
    """A file with nothing in it."""

    def read(self, n: int = -1) -> bytes:
        return b""

    def close(self) -> None:
        pass


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The system's trusted certificates, host names checked (made once)."""
    return ssl.create_default_context()


class PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to `host` (its Host header) that connects to the checked `address` only."""

    def __init__(self, host: str, port: int, address: str, timeout_s: float) -> None:
        super().__init__(host, port, timeout=timeout_s)
        self.address = address
        self.tcp: socket.socket | None = None  # the TCP socket, also after a "Connection: close" response

    def connect(self) -> None:
        self.sock = self.tcp = socket.create_connection((self.address, self.port), self.timeout)


class PinnedHTTPSConnection(PinnedHTTPConnection):
    """HTTPS to `host` (Host header, TLS server name and certificate check) at the checked `address` only."""

    default_port = 443

    def connect(self) -> None:
        super().connect()
        self.sock = self.tcp = tls_context().wrap_socket(self.sock, server_hostname=self.host)


class HttpReader:
    """A read-only, file-like HTTP(S) resource for PyAV (`read`, `seek`, `tell`, `seekable`, `close`).

    Every request, redirects included, goes to an address the guard checked. A resource with a length is seekable:
    a seek makes a new request with a Range header (or reads on, for a short forward seek, or when the server
    ignores Range). `offset`/`end` restrict it to bytes [offset, end) of the resource (HLS byte ranges). A
    response other than 2xx, too many redirects or a redirect to another scheme raise OSError or AddressRefused.
    """

    def __init__(self, url: str, guard: UrlGuard, offset: int = 0, end: int | None = None) -> None:
        self.url, self._guard, self._end = url, guard, end
        self._conn: PinnedHTTPConnection | None = None
        self._resp: http.client.HTTPResponse | None = None
        self._pos = offset
        self.size: int | None = None  # the resource's length, when the server says it
        self.content_type: str | None = None
        self._request(offset)

    def _request(self, offset: int) -> None:
        self.close()
        url = self.url
        for _ in range(self._guard.max_redirects + 1):
            if urlsplit(url).scheme.lower() not in HTTP_SCHEMES:
                raise AddressRefused(f"a redirect to a {urlsplit(url).scheme.lower()!r} URL is not followed")
            scheme, host, port = split_host(url)
            address = self._guard.check_address(host, port)
            parts = urlsplit(url)
            headers = {"User-Agent": USER_AGENT, "Accept": "*/*", "Accept-Encoding": "identity"}
            if offset or self._end is not None:
                headers["Range"] = f"bytes={offset}-" + ("" if self._end is None else str(self._end - 1))
            if parts.username is not None:
                creds = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
                headers["Authorization"] = "Basic " + base64.b64encode(creds).decode()
            cls = PinnedHTTPSConnection if scheme == "https" else PinnedHTTPConnection
            conn = cls(host, port, address, self._guard.timeout_s)
            try:
                conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), headers=headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise OSError(f"{host}: {e}") from None
            location = resp.getheader("Location")
            if resp.status in (301, 302, 303, 307, 308) and location:
                conn.close()
                url = urljoin(url, location)
                continue
            if not 200 <= resp.status < 300:
                conn.close()
                raise OSError(f"HTTP {resp.status} {resp.reason} from {host}")
            conn.tcp.settimeout(self._guard.read_timeout_s)
            self.url, self._conn, self._resp = url, conn, resp
            self.content_type = resp.getheader("Content-Type")
            self._pos = offset
            self._set_size(resp)
            if offset and resp.status != 206:  # the server ignored Range: read on to the offset
                self._pos = 0
                self._skip(offset)
            return
        raise OSError(f"more than {self._guard.max_redirects} redirects from {self.url}")

    def _set_size(self, resp: http.client.HTTPResponse) -> None:
        content_range = resp.getheader("Content-Range") or ""
        if resp.status == 206 and "/" in content_range and content_range.rsplit("/", 1)[1].isdigit():
            self.size = int(content_range.rsplit("/", 1)[1])
        elif resp.status != 206 and resp.length is not None:
            self.size = resp.length

    def _skip(self, n: int) -> None:
        if n - self._pos > MAX_SKIP_BYTES:
            raise OSError(f"cannot seek in {self.url}: the server does not serve byte ranges")
        while self._pos < n:
            if not self.read(min(n - self._pos, SHORT_SEEK_BYTES)):
                break

    def read(self, n: int = -1) -> bytes:
        if self._resp is None:
            return b""
        if self._end is not None:
            n = max(0, self._end - self._pos) if n < 0 else min(n, max(0, self._end - self._pos))
            if n == 0:
                return b""
        try:
            data = self._resp.read1(n if n >= 0 else SHORT_SEEK_BYTES)
        except (OSError, http.client.HTTPException) as e:
            raise OSError(f"reading {self.url}: {e}") from None
        self._pos += len(data)
        return data

    def seekable(self) -> bool:
        return self.size is not None

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        target = {0: offset, 1: self._pos + offset, 2: (self.size or 0) + offset}[whence]
        if target < 0 or (whence == 2 and self.size is None):
            raise OSError(f"cannot seek to {offset} (whence {whence}) in {self.url}")
        if target == self._pos:
            return target
        if self._pos < target <= self._pos + SHORT_SEEK_BYTES and self._resp is not None:
            self._skip(target)
        if target != self._pos:
            self._request(target)
        return self._pos

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = self._resp = None
