"""Which sources a client of the hub may open, and how: one policy for the HTTP API and the web page.

    policy = SourcePolicy(allow_dirs=["/srv/videos"], frame_px=112)
    target = policy.resolve("shapes_7")            # Target(kind, label, spec), or SourceRefused saying why not
    policy.check(target)                           # a URL's host looked up (may wait on the network)
    source = target.open(fps=2.0)                  # a live FrameSource

A source spec names one of:
- "push": frames pushed by the client (an HTTP body, a realtime message, the page's webcam or /push_frame);
- a bundled demo clip by name (streamvid.assets.demo_clips), played in real time;
- the operator's own `--video` (`streamvid demo --video V`): trusted, whatever `streamvid run` would open;
- a network URL (rtsp, rtsps, rtmp, rtmps, http, https) opened with network protocols only, whose host (and every
  redirect and nested resource: HLS segments ...) must resolve to public addresses (streamvid.media.net_policy.UrlGuard;
  `allow_private_urls` lifts that for cameras on the operator's network); a URL that drops is reopened with
  exponential backoff and given up after `max_outage_s` without frames;
- a video file under one of the `allow_dirs` (`--allow-dir`; none by default) or, when the caller asks for them
  (`resolve(spec, uploads=True)`: the web page), one of the `upload_dirs` of at most `max_upload_mb`.
Files are opened with plain container demuxers only, so a playlist or concat list cannot name other files. Anything
else (another path, file:, concat:, pipe: ...) is refused in one line. Frames larger than `max_frame_pixels` are
refused from the size their stream declares, before a frame is decoded, and frames are resized to `frame_px` right
after decoding.

What may wait on the network: `check` of a URL (its host is looked up, unless private URLs are allowed) and the
open of a URL (connect, probe: ffmpeg gives up connecting, and then probing, after `open_timeout_s`). The hub runs
the open on threads of its own (opening.OpenPool).

Thread contract: immutable after construction; every method from any thread.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from streamvid.assets import demo_clips
from streamvid.errors import Refused
from streamvid.hub.images import DEFAULT_MAX_PIXELS
from streamvid.media.decoding import FrameTooLarge, open_container
from streamvid.media.file_source import FileSource
from streamvid.media.frame_source import FrameSource
from streamvid.media.live_source import LIVE_OPEN_TIMEOUT_S, MAX_OUTAGE_S, LiveSource
from streamvid.media.net_policy import AddressRefused, UrlGuard, public_address
from streamvid.media.push_source import PushSource
from streamvid.media.source_spec import open_source

VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".webm", ".mkv", ".avi")
URL_SCHEMES = ("rtsp", "rtsps", "rtmp", "rtmps", "http", "https")
# ffmpeg protocols a URL source may use, nested ones included (an HLS playlist cannot reach file: or pipe:)
NETWORK_PROTOCOLS = "rtsp,rtsps,rtmp,rtmps,rtp,srtp,udp,tcp,tls,http,https,httpproxy,crypto"
# demuxers a file may use: plain containers, no playlists or concat lists
FILE_FORMATS = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi"
MAX_SPEC = 2000
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")


class SourceRefused(Refused):
    """A source the policy does not allow, or one that cannot be opened; the message says why."""


@dataclass(frozen=True)
class Target:
    kind: str  # "push" | "clip" | "operator" | "url" | "file" | "upload"
    label: str  # how it is shown (a URL as given: the hub redacts it where it shows it)
    spec: str  # "push", a file path, a URL, or the operator's --video spec
    policy: SourcePolicy | None = field(default=None, compare=False, repr=False)

    def open(self, fps: float) -> FrameSource:
        return self.policy.open(self, fps)


@dataclass(frozen=True)
class SourcePolicy:
    clips: dict[str, Path] = field(default_factory=demo_clips)  # name -> file: bundled demo clips
    allow_dirs: tuple[Path, ...] = ()  # --allow-dir: folders whose videos any client may open
    upload_dirs: tuple[Path, ...] = ()  # the web page's upload folders (resolve(..., uploads=True))
    max_upload_mb: float = 200.0
    operator_video: str | None = None  # `streamvid demo --video V`: a path, URL or cam:N the operator chose
    max_frame_pixels: int = DEFAULT_MAX_PIXELS
    allow_private_urls: bool = False  # True: URLs may reach loopback, LAN and other non-public addresses
    max_outage_s: float | None = MAX_OUTAGE_S  # a URL without frames this long is given up (None: never)
    open_timeout_s: float = LIVE_OPEN_TIMEOUT_S  # a URL's connect, and then its probe, give up after this long
    frame_px: int | None = None  # frames of clips, files and URLs are resized to this right after decoding
    check_address: Callable[[str, int], str] = public_address  # (host, port) -> address to use, or AddressRefused

    def __post_init__(self):
        for name in ("allow_dirs", "upload_dirs"):
            object.__setattr__(self, name, tuple(Path(d).resolve() for d in getattr(self, name)))
        for d in self.allow_dirs:
            if not d.is_dir():
                raise ValueError(f"--allow-dir {d}: not a folder")
        if not self.max_upload_mb > 0:
            raise ValueError(f"max_upload_mb must be positive, got {self.max_upload_mb}")
        if isinstance(self.max_frame_pixels, bool) or not isinstance(self.max_frame_pixels, int) \
                or self.max_frame_pixels <= 0:
            raise ValueError(f"max_frame_pixels must be a positive whole number, got {self.max_frame_pixels!r}")
        if self.max_outage_s is not None and not self.max_outage_s > 0:
            raise ValueError(f"max_outage_s must be positive, got {self.max_outage_s}")
        video = self.operator_video
        if video is not None and not _SCHEME.match(video) and not Path(video).is_file():
            raise ValueError(f"video file not found: {video}")

    @property
    def operator_name(self) -> str | None:
        """The name the operator's --video is listed under (a file's stem, else the spec itself)."""
        if self.operator_video is None:
            return None
        if _SCHEME.match(self.operator_video) and not Path(self.operator_video).exists():
            return self.operator_video
        return Path(self.operator_video).stem

    def choices(self) -> list[str]:
        """Names a page offers: the operator's --video first, then the bundled clips."""
        names = [self.operator_name] if self.operator_name else []
        return names + [n for n in self.clips if n not in names]

    def is_url(self, spec: object) -> bool:
        """Whether `spec` names a network URL (checking it may look its host up, opening it connects); cheap, and
        says nothing about whether the URL is allowed."""
        scheme = _SCHEME.match(spec.strip()) if isinstance(spec, str) else None
        return bool(scheme) and len(scheme.group(1)) > 1 and scheme.group(1).lower() in URL_SCHEMES

    def resolve(self, spec: object, uploads: bool = False) -> Target:
        """The target a spec names (with `uploads`, files in the upload folders too); SourceRefused saying why
        not. Looks nothing up on the network (see `check`)."""
        if not isinstance(spec, str) or not spec.strip():
            raise SourceRefused('no source given: "source" must be "push", a demo clip name, a URL or an allowed '
                                'file')
        spec = spec.strip()
        if len(spec) > MAX_SPEC:
            raise SourceRefused(f"source is {len(spec):,} characters long; at most {MAX_SPEC:,} are accepted")
        if spec == "push":
            return Target("push", "push", "push", self)
        if self.operator_video is not None and spec in (self.operator_name, self.operator_video):
            return Target("operator", self.operator_name, self.operator_video, self)
        if spec in self.clips:
            return Target("clip", spec, str(self.clips[spec]), self)
        scheme = _SCHEME.match(spec)
        if scheme and len(scheme.group(1)) > 1:  # (a one-letter "scheme" is a Windows drive)
            if scheme.group(1).lower() not in URL_SCHEMES:
                raise SourceRefused(f"URL scheme {scheme.group(1)!r} is not allowed; use one of "
                                    f"{', '.join(URL_SCHEMES)}")
            return Target("url", spec, spec, self)
        return self._file(spec, uploads)

    def _file(self, spec: str, uploads: bool) -> Target:
        try:
            real = Path(spec).resolve(strict=True)
        except (OSError, RuntimeError, ValueError):
            real = None
        if real is not None and real in {c.resolve() for c in self.clips.values()}:
            return Target("clip", real.parent.name, str(real), self)
        kind = next((kind for kind, dirs in (("file", self.allow_dirs), ("upload", self.upload_dirs if uploads
                                                                                    else ()))
                     if real is not None and any(real != d and real.is_relative_to(d) for d in dirs)), None)
        if kind is None or not real.is_file():
            names = ", ".join(self.choices()) or "none"
            where = (f"files under {', '.join(str(d) for d in self.allow_dirs)}" if self.allow_dirs
                     else "no other files (no --allow-dir)")
            raise SourceRefused(f"{spec[:200]!r} is not \"push\", a demo clip ({names}), "
                                f"{'an uploaded file, ' if uploads else ''}a URL or an allowed file; this server "
                                f"opens {where}")
        if real.suffix.lower() not in VIDEO_SUFFIXES:
            raise SourceRefused(f"{real.name}: expected a video file ({', '.join(VIDEO_SUFFIXES)}), got "
                                f"{real.suffix or 'no extension'}")
        size_mb = real.stat().st_size / 2**20
        if kind == "upload" and size_mb > self.max_upload_mb:
            raise SourceRefused(f"{real.name}: {size_mb:.1f} MB is over the upload limit of {self.max_upload_mb:g} "
                                f"MB")
        return Target(kind, real.name, str(real), self)

    def guard(self) -> UrlGuard | None:
        """What URL sources are opened with (None when `allow_private_urls`)."""
        return None if self.allow_private_urls else UrlGuard(self.check_address, timeout_s=self.open_timeout_s)

    def check(self, target: Target) -> None:
        """A URL's host looked up (may wait on the network): SourceRefused for a private or unresolvable one."""
        guard = self.guard() if target.kind == "url" else None
        if guard is not None:
            try:
                guard.check(target.spec)
            except AddressRefused as e:
                raise SourceRefused(str(e)) from None

    def open(self, target: Target, fps: float, size: int | None = None) -> FrameSource:
        """The target as a live source (frames `size` wide, by default `frame_px`): files are played in real time,
        URLs decoded as they come, "push" waits for frames. SourceRefused with the reason when it cannot be
        opened."""
        size = self.frame_px if size is None else size
        if target.kind == "push":
            return PushSource(fps)
        try:
            if target.kind == "url":
                return LiveSource(target.spec, fps, size=size, options={"protocol_whitelist": NETWORK_PROTOCOLS},
                                  max_outage_s=self.max_outage_s, max_frame_pixels=self.max_frame_pixels,
                                  guard=self.guard(), open_timeout_s=self.open_timeout_s)
            if target.kind == "operator":  # trusted: whatever `streamvid run` would open, within the frame cap
                return open_source(target.spec, fps=fps, realtime=True, size=size,
                                   max_frame_pixels=self.max_frame_pixels)
            try:
                open_container(target.spec, target.label, self.max_frame_pixels,
                               options={"format_whitelist": FILE_FORMATS}).close()
            except FrameTooLarge:
                raise
            except ValueError as e:
                why = getattr(e.__cause__, "strerror", None) or e
                raise SourceRefused(f"{target.label}: not a video file this server can play ({why})") from None
            return FileSource(target.spec, fps, realtime=True, size=size, max_frame_pixels=self.max_frame_pixels)
        except (AddressRefused, FrameTooLarge) as e:
            raise SourceRefused(f"{target.label}: {e}" if target.kind != "url" else str(e)) from None
        except SourceRefused:
            raise
        except ValueError as e:
            raise SourceRefused(str(e)) from None
