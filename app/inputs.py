"""What the web app may open: the input policy of `streamvid demo`.

    policy = InputPolicy.default(upload_dirs=[gradio_upload_folder], extra_video="cam:0")
    target = policy.resolve("shapes_7")        # a bundled demo clip, an uploaded file, a URL or "push"
    source = policy.open(target, fps=2.0, size=112)

A source spec typed into the page or sent to `/start` can name only: "push" (frames sent by the browser webcam or
`/push_frame`), a bundled demo clip by name, the operator's `--video`, a file inside the upload area, or a network
URL (rtsp, rtmp, http, https). Any other path, even one that exists, is refused, and so is every other URL scheme
(file:, concat:, pipe: ...). Files are opened only with container demuxers (no playlists or concat lists that
could name other files) and URLs only with network protocols.

Videos whose frames are larger than `max_frame_pixels` (files, uploads, URLs, the operator's --video) are refused
from the size their stream declares, before a frame is decoded, and frames are resized to the model's size right
after decoding. URLs may reach public hosts only: a URL, a redirect or a resource a stream names (HLS segments ...)
whose host resolves to a loopback, private, link-local, multicast, unspecified or reserved address is refused with
the same message whether or not anything listens there (streamvid.net_policy; `check_address` decides, and
`allow_private_urls` turns the check off for cameras on the LAN). A URL that drops is reopened with exponential
backoff and given up after `max_outage_s` without frames. The operator's --video is trusted: only the frame cap
applies to it.

Thread contract: an `InputPolicy` is immutable after construction; `resolve` and `open` may be called from any
thread.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import av

from streamvid.assets import demo_clips
from streamvid.decoding import FrameTooLarge, check_frame_size
from streamvid.net_policy import AddressRefused, UrlGuard, public_address
from streamvid.sources import MAX_OUTAGE_S, FileSource, FrameSource, LiveSource, PushSource, open_source

VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".webm", ".mkv", ".avi")
URL_SCHEMES = ("rtsp", "rtsps", "rtmp", "rtmps", "http", "https")
# ffmpeg protocols a URL source may use, nested ones included (an HLS playlist cannot reach file: or pipe:)
NETWORK_PROTOCOLS = "rtsp,rtsps,rtmp,rtmps,rtp,srtp,udp,tcp,tls,http,https,httpproxy,crypto"
# demuxers an uploaded or bundled file may use: plain containers, no playlists or concat lists
FILE_FORMATS = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi"
DEFAULT_MAX_FRAME_PIXELS = 4096 * 4096
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")


class InputRefused(ValueError):
    """A source spec the policy does not allow, with the reason in words."""


@dataclass(frozen=True)
class Target:
    kind: str  # "push" | "clip" | "upload" | "url" | "operator"
    label: str  # what the page shows
    spec: str  # "push", a file path, a URL, or the operator's --video spec


@dataclass(frozen=True)
class InputPolicy:
    clips: dict[str, Path]  # name -> file: bundled demo clips
    upload_dirs: tuple[Path, ...]  # resolved folders where the web server stores uploads
    operator_video: str | None = None  # `streamvid demo --video V`: a path, URL or cam:N the operator chose
    max_upload_mb: float = 200.0
    max_frame_pixels: int = DEFAULT_MAX_FRAME_PIXELS  # videos and pushed images with larger frames are refused
    allow_private_urls: bool = False  # True: URLs may reach loopback, LAN and other non-public addresses
    max_outage_s: float | None = MAX_OUTAGE_S  # a URL without frames this long is given up (None: never)
    check_address: Callable[[str, int], str] = public_address  # (host, port) -> address to use, or AddressRefused

    def __post_init__(self):
        object.__setattr__(self, "upload_dirs", tuple(Path(d).resolve() for d in self.upload_dirs))
        if self.max_upload_mb <= 0:
            raise ValueError(f"max_upload_mb must be positive, got {self.max_upload_mb}")
        if isinstance(self.max_frame_pixels, bool) or not isinstance(self.max_frame_pixels, int) \
                or self.max_frame_pixels <= 0:
            raise ValueError(f"max_frame_pixels must be a positive whole number, got {self.max_frame_pixels!r}")
        if self.max_outage_s is not None and not self.max_outage_s > 0:
            raise ValueError(f"max_outage_s must be positive, got {self.max_outage_s}")
        video = self.operator_video
        if video is not None and not _SCHEME.match(video) and not Path(video).is_file():
            raise ValueError(f"video file not found: {video}")

    @classmethod
    def default(cls, upload_dirs, operator_video: str | None = None, max_upload_mb: float = 200.0,
                max_frame_pixels: int = DEFAULT_MAX_FRAME_PIXELS, allow_private_urls: bool = False,
                max_outage_s: float | None = MAX_OUTAGE_S) -> InputPolicy:
        return cls(demo_clips(), tuple(upload_dirs), operator_video, max_upload_mb, max_frame_pixels,
                   allow_private_urls, max_outage_s)

    @property
    def operator_name(self) -> str | None:
        """The name the operator's --video is listed under (a file's stem, else the spec itself)."""
        if self.operator_video is None:
            return None
        if _SCHEME.match(self.operator_video) and not Path(self.operator_video).exists():
            return self.operator_video
        return Path(self.operator_video).stem

    def choices(self) -> list[str]:
        """Names the page offers: the operator's --video first, then the bundled clips."""
        names = [self.operator_name] if self.operator_name else []
        return names + [n for n in self.clips if n not in names]

    def resolve(self, spec: str) -> Target:
        """The target a spec names, or InputRefused saying why not."""
        spec = (spec or "").strip()
        if not spec:
            raise InputRefused("no source given: a demo clip name, an uploaded file, a URL or \"push\"")
        if spec == "push":
            return Target("push", "pushed frames", "push")
        if spec == self.operator_name or spec == self.operator_video:
            return Target("operator", self.operator_name, self.operator_video)
        if spec in self.clips:
            return Target("clip", spec, str(self.clips[spec]))
        scheme = _SCHEME.match(spec)
        if scheme and len(scheme.group(1)) > 1:  # (a one-letter "scheme" is a Windows drive)
            if scheme.group(1).lower() not in URL_SCHEMES:
                raise InputRefused(f"URL scheme {scheme.group(1)!r} is not allowed; use one of "
                                   f"{', '.join(URL_SCHEMES)}")
            return Target("url", spec, spec)
        return self._uploaded(spec)

    def _uploaded(self, spec: str) -> Target:
        path = Path(spec)
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):
            real = None
        if real is not None and real in {c.resolve() for c in self.clips.values()}:
            return Target("clip", real.parent.name, str(real))
        inside = real is not None and any(real.is_relative_to(root) for root in self.upload_dirs)
        if not inside:
            names = ", ".join(self.choices()) or "none"
            raise InputRefused(f"{spec!r} is not a demo clip ({names}), an uploaded file, a URL or \"push\"")
        if real.suffix.lower() not in VIDEO_SUFFIXES:
            raise InputRefused(f"{path.name}: expected a video file ({', '.join(VIDEO_SUFFIXES)}), "
                               f"got {real.suffix or 'no extension'}")
        size_mb = real.stat().st_size / 2**20
        if size_mb > self.max_upload_mb:
            raise InputRefused(f"{path.name}: {size_mb:.1f} MB is over the upload limit of {self.max_upload_mb:g} MB")
        return Target("upload", path.name, str(real))

    def url_guard(self) -> UrlGuard | None:
        """The guard URL sources are opened with (None when `allow_private_urls`)."""
        return None if self.allow_private_urls else UrlGuard(self.check_address)

    def open(self, target: Target, fps: float, size: int | None = None) -> FrameSource:
        """Open the target as a live source: files are played in real time, URLs decoded as they come, "push"
        waits for frames. Frames are resized to `size` x `size` right after decoding. ValueError (InputRefused
        for what the policy does not allow) with the reason when it cannot be opened."""
        if target.kind == "push":
            return PushSource(fps)
        try:
            if target.kind == "url":
                return LiveSource(target.spec, fps, size=size, options={"protocol_whitelist": NETWORK_PROTOCOLS},
                                  max_outage_s=self.max_outage_s, max_frame_pixels=self.max_frame_pixels,
                                  guard=self.url_guard())
            if target.kind == "operator":  # trusted: whatever `streamvid run` would open, within the frame cap
                return open_source(target.spec, fps=fps, realtime=True, size=size,
                                   max_frame_pixels=self.max_frame_pixels)
            _check_container(target.spec, target.label, self.max_frame_pixels)
            return FileSource(target.spec, fps, realtime=True, size=size, max_frame_pixels=self.max_frame_pixels)
        except (AddressRefused, FrameTooLarge) as e:
            raise InputRefused(f"{target.label}: {e}" if target.kind != "url" else str(e)) from None


def _check_container(path: str, label: str, max_frame_pixels: int) -> None:
    """Refuse a file that is not a plain video container (a playlist or concat list could name other files), or
    whose frames are above the cap (probing decodes no frame above twice the cap: ffmpeg's max_pixels)."""
    try:
        with av.open(path, options={"format_whitelist": FILE_FORMATS, "max_pixels": str(2 * max_frame_pixels)}) as c:
            if not c.streams.video:
                raise InputRefused(f"{label}: no video stream")
            codec = c.streams.video[0].codec_context
            check_frame_size(codec.width, codec.height, max_frame_pixels)
    except av.error.FFmpegError as e:
        raise InputRefused(f"{label}: not a video file this app can play ({e.strerror or e})") from e
