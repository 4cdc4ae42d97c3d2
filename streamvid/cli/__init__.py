"""The `streamvid` command: the entry point (main), the engine's flags (engine_flags), `streamvid run` (run) and
`streamvid bench` (bench, bench_streams).

cli/ is the top of the library: nothing below it imports it (serve's command is registered from here).
"""
