"""`streamvid serve`: the HTTP API (OpenAI-compatible chat about live video, SSE events, a realtime WebSocket) over
one engine, or over R engines on Ray Serve.

    streamvid serve [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--model M] [--allow-dir DIR]...
                    [--alert-webhook URL]... [--webhook-thumbnails] [--no-alert-media] [--stream-idle-timeout-s 600]
                    [--session-save-s 60]
                    [--source-open-timeout-s 10] [--allowed-host NAME]... [--cors-origin ORIGIN]...
                    [--max-json-mb 1] [--request-timeout-s 30] [--max-connections 256] [--ui]
                    [--ray [ADDRESS] --replicas R [--max-replicas N --streams-per-replica S]] [engine flags]

Registered by streamvid/cli/main.py's build_parser (`register`). Routes: docs/api.md.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time


def register(sub: argparse._SubParsersAction) -> None:
    from streamvid.audio.voices import best_voice
    from streamvid.cli.engine_flags import add_engine_args
    s = sub.add_parser("serve", help="HTTP API: OpenAI-compatible chat about streams, SSE events, realtime WebSocket, "
                                     "Ray Serve replicas")
    s.add_argument("--host", default="127.0.0.1", help="address to bind; other than loopback needs --api-key")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--api-key", default=None, metavar="KEY",
                   help="require 'Authorization: Bearer KEY' on every /v1 route (default: $STREAMVID_API_KEY)")
    s.add_argument("--allow-dir", action="append", default=[], metavar="DIR",
                   help="a folder whose video files clients may open as sources (repeatable; default: none)")
    s.add_argument("--allow-private-urls", action="store_true",
                   help="let URL sources reach loopback, LAN and other non-public addresses")
    s.add_argument("--max-frame-pixels", type=int, default=4096 * 4096, metavar="N",
                   help="refuse images and videos whose frames have more pixels (default: 4096x4096)")
    s.add_argument("--max-outage-s", type=float, default=300.0,
                   help="give up on a URL that sends no frames for this long")
    s.add_argument("--source-open-timeout-s", type=float, default=10.0, metavar="SECONDS",
                   help="a URL source that has not connected and been probed this long after its stream was "
                        "created fails (its stream's state: failed, with the reason)")
    s.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="also answer requests whose Host header names NAME (repeatable; default: the bound address, "
                        "and the loopback names on a loopback bind)")
    s.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="let browser pages from ORIGIN (scheme://host[:port]) call the API (repeatable; default: "
                        "the server's own origin only)")
    s.add_argument("--ice-server", action="append", default=[], metavar="URL",
                   help="a STUN or TURN server for WebRTC calls (POST /v1/realtime/calls): stun:HOST:PORT or "
                        "turn:USER:PASSWORD@HOST:PORT (repeatable; default: none, host candidates only)")
    s.add_argument("--max-json-mb", type=float, default=1.0, metavar="MB",
                   help="refuse request bodies other than frame images above this size (413), before reading them")
    s.add_argument("--request-timeout-s", type=float, default=30.0, metavar="SECONDS",
                   help="drop a connection whose request head, or any part of whose body, takes longer than this")
    s.add_argument("--max-connections", type=int, default=256, metavar="N",
                   help="open connections and requests at once; beyond them the server answers 503")
    s.add_argument("--answer-timeout-s", type=float, default=120.0,
                   help="a chat completion waits this long for its answer (then 504)")
    s.add_argument("--alert-webhook", action="append", default=[], metavar="URL",
                   help="POST every alert as JSON to URL (repeatable; retried with backoff, never blocks the engine)")
    s.add_argument("--webhook-thumbnails", action="store_true",
                   help="send each alert to the webhooks with a small base64 JPEG of its snapshot (\"thumbnail\")")
    s.add_argument("--no-alert-media", action="store_true",
                   help="keep no snapshots and clips of alerts (alerts then carry no alert_id and no URLs)")
    s.add_argument("--tts", default="auto", metavar="VOICE",
                   help=f"the voice of /v1/audio/speech: auto (the best installed here: {best_voice()}), off, "
                        f"espeak-ng, piper, or a transformers text-to-speech checkpoint (HF id or directory)")
    s.add_argument("--ui", action="store_true", help="also serve the web app's page at / on the same engine")
    s.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="serve through Ray Serve on the cluster at ADDRESS (a local one without it)")
    s.add_argument("--replicas", "--min-replicas", type=int, default=2, dest="replicas",
                   help="with --ray: engine replicas, one engine each (with --max-replicas: the fewest there are)")
    s.add_argument("--max-replicas", type=int, default=None, metavar="N",
                   help="with --ray and --streams-per-replica: add engine replicas up to N")
    s.add_argument("--streams-per-replica", type=int, default=None, metavar="S",
                   help="with --ray: add a replica when a stream opens while every replica holds S streams")
    s.add_argument("--scale-down-after-s", type=float, default=300.0, metavar="SECONDS",
                   help="remove an added replica that has held no stream this long")
    s.add_argument("--stream-idle-timeout-s", type=float, default=600.0, metavar="SECONDS",
                   help="close a stream without frames, questions or reads this long (0: never)")
    s.add_argument("--session-save-s", type=float, default=60.0, metavar="SECONDS",
                   help="save a stream opened with a session_dir this often, and when it closes (0: only then)")
    add_engine_args(s)
    s.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from streamvid.cli.engine_flags import check_model, embedder_checkpoint, engine_config, offline_if_local
    from streamvid.serve.options import ServeOptions, model_id
    from streamvid.serve.server import check_bind

    api_key = args.api_key if args.api_key is not None else os.environ.get("STREAMVID_API_KEY") or None
    check_bind(args.host, api_key)  # refused before anything loads
    if args.ui and args.ray:
        raise ValueError("--ui serves the page on this process's engine: it cannot be combined with --ray")
    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    policy = _scale_policy(args)
    offline_if_local(args.model, embedder_checkpoint(args))
    cfg = server_memory(engine_config(args))
    check_model(cfg.model)
    if not 0 < args.max_json_mb < float("inf") or args.max_connections < 1:
        raise ValueError("--max-json-mb must be > 0 and --max-connections at least 1")
    options = ServeOptions(api_key=api_key, model_id=model_id(cfg.model), allow_dirs=tuple(args.allow_dir),
                           allow_private_urls=args.allow_private_urls, max_frame_pixels=args.max_frame_pixels,
                           max_outage_s=args.max_outage_s, answer_timeout_s=args.answer_timeout_s,
                           source_open_timeout_s=_positive(args.source_open_timeout_s, "--source-open-timeout-s"),
                           max_new_tokens=cfg.generation.max_new_tokens, webhook_urls=tuple(args.alert_webhook),
                           webhook_thumbnails=args.webhook_thumbnails, alert_media=not args.no_alert_media,
                           tts=args.tts,
                           stream_idle_timeout_s=_seconds(args.stream_idle_timeout_s, "--stream-idle-timeout-s"),
                           session_save_s=_seconds(args.session_save_s, "--session-save-s"),
                           host=args.host, allowed_hosts=tuple(args.allowed_host), cors_origins=tuple(args.cors_origin),
                           max_json_mb=args.max_json_mb, ice_servers=_ice_servers(args.ice_server),
                           request_timeout_s=_positive(args.request_timeout_s, "--request-timeout-s"))
    from streamvid.hub.policy import SourcePolicy
    from streamvid.serve.webhooks import WebhookSender

    SourcePolicy(allow_dirs=options.allow_dirs)  # a missing --allow-dir is one line now
    WebhookSender.check(options.webhook_urls)
    if args.ray:
        return _serve_ray(args, cfg, options, policy)
    from streamvid.engine.engine import Engine
    from streamvid.serve.server import build_app, serve

    engine = Engine(cfg)
    try:
        app = build_app(engine, options, ui=args.ui)
        print(f"streamvid serve: http://{args.host}:{args.port} (model {options.model_id}; docs at /docs)",
              file=sys.stderr, flush=True)
        serve(app, args.host, args.port, options.max_body_mb, options.request_timeout_s, args.max_connections)
    finally:
        engine.close()
    return 0


def server_memory(cfg):
    """A server's engine with a cap on the host RAM its streams' long-term memories may hold together: the
    --engine-memory-mb given, else half this machine's RAM; each stream's --memory-ram-mb, when left at its default,
    is then its share of the cap at --max-streams (beyond it a stream's blocks spill to disk)."""
    from streamvid.config import DEFAULTS

    if cfg.scheduler.memory_mb is not None:
        return cfg
    cap = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 / 2
    settings = {"engine_memory_mb": round(cap, 1)}
    if cfg.memory.ram_mb == DEFAULTS.memory.ram_mb:
        share = math.floor(cap / cfg.scheduler.max_streams * 10) / 10  # rounded down: max_streams fit the cap
        settings["memory_ram_mb"] = min(cfg.memory.ram_mb, share)
    return cfg.replace(**settings)


def _seconds(value: float, flag: str) -> float | None:
    """A period in seconds, 0 meaning off (None)."""
    if not value >= 0:
        raise ValueError(f"{flag} must be a number of seconds >= 0 (0: off), got {value}")
    return value or None


def _positive(value: float, flag: str) -> float:
    """A period in seconds that must be > 0 (and finite)."""
    if not 0 < value < float("inf"):
        raise ValueError(f"{flag} must be a number of seconds > 0, got {value}")
    return value


def _scale_policy(args: argparse.Namespace):
    """The replicas of --ray: fixed, or from --replicas to --max-replicas on --streams-per-replica."""
    from streamvid.serve.scaling import ScalePolicy

    if not args.ray and (args.max_replicas is not None or args.streams_per_replica is not None):
        raise ValueError("--max-replicas and --streams-per-replica are for --ray")
    if args.streams_per_replica is not None and (args.max_replicas or 0) <= args.replicas:
        raise ValueError(f"--streams-per-replica needs --max-replicas above --replicas ({args.replicas}): the most "
                         f"engine replicas there may be")
    return ScalePolicy(args.replicas, args.max_replicas, args.streams_per_replica, args.scale_down_after_s)


def _serve_ray(args: argparse.Namespace, cfg, options, policy) -> int:
    from streamvid.media.net_policy import is_loopback

    loopback = args.ray == "local" and is_loopback(args.host)
    if loopback:
        # Ray binds a local cluster's ports (GCS, raylet, object manager, workers, dashboard and runtime-env agents)
        # to loopback only when the node's address is 127.0.0.1, and ray.init(_node_ip_address="127.0.0.1") swaps in
        # the host's own address; with this setting (read when ray is imported) Ray takes 127.0.0.1 as the node's.
        # Ray Serve still opens each replica's inter-deployment gRPC port on every interface (token-authenticated).
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    from ray import serve

    from streamvid.serve.ray_app import application

    if args.ray == "local":
        ray.init(include_dashboard=False, log_to_driver=False)
        if loopback and not is_loopback(ray.util.get_node_ip_address()):
            print(f"streamvid serve: warning: the local Ray cluster's ports listen on {ray.util.get_node_ip_address()}"
                  f" too (Ray was imported before it could be bound to loopback)", file=sys.stderr, flush=True)
    else:
        ray.init(address=args.ray, log_to_driver=False)
    try:
        most = policy.max_replicas  # resources are shared out for the most replicas there may be
        gpus = ray.cluster_resources().get("GPU", 0)
        gpu = 1.0 if cfg.device != "cpu" and gpus >= args.replicas else 0.0
        cpus = ray.cluster_resources().get("CPU", 1)
        per = min(1.0, cpus / most)
        serve.start(http_options={"host": args.host, "port": args.port})
        serve.run(application(cfg, options, args.replicas, cpus_per_replica=per, gpus_per_replica=gpu,
                              threads=max(1, int(cpus // most)) if not gpu else None,
                              max_replicas=policy.max_replicas, streams_per_replica=policy.streams_per_replica,
                              scale_down_after_s=policy.scale_down_after_s),
                  name="streamvid", route_prefix="/")
        scaling = (f" (up to {most} at {policy.streams_per_replica} streams per replica)" if policy.autoscaling
                   else "")
        print(f"streamvid serve: http://{args.host}:{args.port} on Ray Serve, {args.replicas} engine replicas"
              f"{scaling} (model {options.model_id}; docs at /docs)", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


def _ice_servers(urls: list[str]) -> tuple[str, ...]:
    from streamvid.serve.realtime_calls import ice_server

    for url in urls:
        ice_server(url)  # a malformed one is one line now
    return tuple(urls)
