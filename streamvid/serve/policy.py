"""Which sources a client of `streamvid serve` may open: the same rules as the web app's input policy, built from
the library's own pieces (the library never imports the app).

    policy = SourcePolicy(allow_dirs=["/srv/videos"])
    kind, label, open_ = policy.resolve("shapes_7")       # refused here (SourceRefused) before any slot is taken
    source = open_(fps=2.0)                               # a live FrameSource
    policy.is_url("rtsp://cam.example/s")                 # True: resolving and opening it may wait on the network

A source is one of:
- "push": frames sent to `POST /v1/streams/{id}/frames` or the realtime socket (streamvid.sources.PushSource);
- a bundled demo clip by name (streamvid.assets.demo_clips), played in real time;
- a network URL (rtsp, rtsps, rtmp, rtmps, http, https) opened with network protocols only, whose host (and every
  redirect and nested resource) must resolve to public addresses (streamvid.net_policy.UrlGuard with
  public_address; `allow_private_urls` lifts that for cameras on the operator's network);
- a video file under one of the folders the operator named with `--allow-dir` (none by default), opened with plain
  container demuxers only, so a playlist or concat list cannot name other files.
Anything else (another path, file:, concat:, pipe: ...) is refused in one line. Frames larger than
`max_frame_pixels` are refused from the size their stream declares, before a frame is decoded.

What may wait on the network: `resolve` of a URL (its host is looked up, unless private URLs are allowed) and the
opener of a URL (connect, fetch, probe: ffmpeg gives up connecting, and then probing, after `open_timeout_s`; the
http(s) reader of net_policy when no data comes for that long), with a one-line error. The server runs both on
threads of their own (hub.OpenPool), never on those that serve frames and status reads.

Thread contract: immutable after construction; `resolve` and the opener it returns may be called from any thread.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from streamvid.assets import demo_clips
from streamvid.decoding import FrameTooLarge, open_container
from streamvid.net_policy import AddressRefused, UrlGuard, public_address
from streamvid.serve.errors import BadRequest
from streamvid.sources import LIVE_OPEN_TIMEOUT_S, MAX_OUTAGE_S, FileSource, FrameSource, LiveSource, PushSource

VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".webm", ".mkv", ".avi")
URL_SCHEMES = ("rtsp", "rtsps", "rtmp", "rtmps", "http", "https")
# ffmpeg protocols a URL source may use, nested ones included (an HLS playlist cannot reach file: or pipe:)
NETWORK_PROTOCOLS = "rtsp,rtsps,rtmp,rtmps,rtp,srtp,udp,tcp,tls,http,https,httpproxy,crypto"
# demuxers a file may use: plain containers, no playlists or concat lists
FILE_FORMATS = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi"
MAX_SPEC = 2000
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")


class SourceRefused(BadRequest):
    """A source the policy does not allow, or one that cannot be opened; the message says why (400)."""


@dataclass(frozen=True)
class SourcePolicy:
    allow_dirs: tuple[Path, ...] = ()
    max_frame_pixels: int = 4096 * 4096
    allow_private_urls: bool = False
    max_outage_s: float | None = MAX_OUTAGE_S
    open_timeout_s: float = LIVE_OPEN_TIMEOUT_S  # a URL's connect, and then its probe, give up after this long
    frame_px: int | None = None  # frames of clips, files and URLs are resized to this right after decoding
    clips: dict[str, Path] = field(default_factory=demo_clips)
    check_address: Callable[[str, int], str] = public_address

    def __post_init__(self):
        object.__setattr__(self, "allow_dirs", tuple(Path(d).resolve() for d in self.allow_dirs))
        for d in self.allow_dirs:
            if not d.is_dir():
                raise ValueError(f"--allow-dir {d}: not a folder")

    def is_url(self, spec: object) -> bool:
        """Whether `spec` names a network URL (resolving it may look its host up, opening it connects); cheap, and
        says nothing about whether the URL is allowed."""
        if not isinstance(spec, str):
            return False
        scheme = _SCHEME.match(spec.strip())
        return bool(scheme) and len(scheme.group(1)) > 1 and scheme.group(1).lower() in URL_SCHEMES

    def resolve(self, spec: object) -> tuple[str, str, Callable[[float], FrameSource]]:
        """(kind, label, open(fps) -> source) for a source spec; SourceRefused saying why not."""
        if not isinstance(spec, str) or not spec.strip():
            raise SourceRefused('"source" must be "push", a demo clip name, a URL or an allowed file')
        spec = spec.strip()
        if len(spec) > MAX_SPEC:
            raise SourceRefused(f"source is {len(spec):,} characters long; at most {MAX_SPEC:,} are accepted")
        if spec == "push":
            return "push", "push", lambda fps: PushSource(fps)
        if spec in self.clips:
            path = self.clips[spec]
            return "clip", spec, lambda fps: self._file(path, spec, fps)
        scheme = _SCHEME.match(spec)
        if scheme and len(scheme.group(1)) > 1:  # (a one-letter "scheme" is a Windows drive)
            if scheme.group(1).lower() not in URL_SCHEMES:
                raise SourceRefused(f"URL scheme {scheme.group(1)!r} is not allowed; use one of "
                                    f"{', '.join(URL_SCHEMES)}")
            guard = None if self.allow_private_urls else UrlGuard(self.check_address, timeout_s=self.open_timeout_s)
            if guard is not None:
                try:
                    guard.check(spec)  # a private or unresolvable host is refused before a slot is taken
                except AddressRefused as e:
                    raise SourceRefused(str(e)) from None
            return "url", spec, lambda fps: self._url(spec, fps, guard)
        path = self._allowed_file(spec)
        return "file", path.name, lambda fps: self._file(path, path.name, fps)

    def _allowed_file(self, spec: str) -> Path:
        try:
            real = Path(spec).resolve(strict=True)
        except (OSError, RuntimeError):
            real = None
        if real is None or not any(real.is_relative_to(d) for d in self.allow_dirs) or not real.is_file():
            where = (f"a file under {', '.join(str(d) for d in self.allow_dirs)}" if self.allow_dirs
                     else "no files (the server has no --allow-dir)")
            raise SourceRefused(f"{spec[:200]!r} is not \"push\", a demo clip ({', '.join(self.clips) or 'none'}), "
                                f"a URL or an allowed file; this server opens {where}")
        if real.suffix.lower() not in VIDEO_SUFFIXES:
            raise SourceRefused(f"{real.name}: expected a video file ({', '.join(VIDEO_SUFFIXES)}), got "
                                f"{real.suffix or 'no extension'}")
        return real

    def _file(self, path: Path, label: str, fps: float) -> FrameSource:
        """A clip or allowed file played in real time: plain containers only, frames within the cap."""
        try:
            container = open_container(str(path), label, self.max_frame_pixels,
                                       options={"format_whitelist": FILE_FORMATS})
            container.close()
            return FileSource(path, fps, realtime=True, size=self.frame_px, max_frame_pixels=self.max_frame_pixels)
        except (FrameTooLarge, ValueError) as e:
            raise SourceRefused(f"{label}: {e}") from None

    def _url(self, url: str, fps: float, guard: UrlGuard | None) -> FrameSource:
        try:
            return LiveSource(url, fps, size=self.frame_px, options={"protocol_whitelist": NETWORK_PROTOCOLS},
                              max_outage_s=self.max_outage_s, max_frame_pixels=self.max_frame_pixels, guard=guard,
                              open_timeout_s=self.open_timeout_s)
        except (AddressRefused, FrameTooLarge, ValueError) as e:
            raise SourceRefused(str(e)) from None
