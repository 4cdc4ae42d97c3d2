"""What `streamvid demo` prints for its user: one line saying where the page is, and on Ctrl-C or SIGTERM one line
saying it was interrupted; none of the web framework's own lines (its share hint, its "Keyboard interruption")."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading

import httpx
import pytest
from conftest import ctrl_c_as_at_a_terminal


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_demo_prints_where_it_serves_and_nothing_of_gradios_own(tmp_path, stop):
    port = _free_port()
    env = {**os.environ, "GRADIO_TEMP_DIR": str(tmp_path)}
    env.pop("STREAMVID_AUTH", None)
    server = subprocess.Popen([sys.executable, "-m", "streamvid.cli", "demo", "--port", str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=ctrl_c_as_at_a_terminal)
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in server.stdout:
            lines.append(line)
            if "open http" in line:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(180), f"no line saying where the page is: {lines}"  # the model loads first
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).status_code == 200  # it serves where it says
    finally:
        server.send_signal(stop)
        code = server.wait(timeout=60)
        reader.join(timeout=10)
    err = server.stderr.read()
    out = "".join(lines)
    assert code == 130, (code, out, err)
    assert re.fullmatch(rf"streamvid demo: open http://127\.0\.0\.1:{port}/? in a browser \(Ctrl-C to stop\)\n", out)
    assert err.strip().splitlines()[-1] == "streamvid demo: interrupted"
    for noise in ("share=True", "Keyboard interruption", "Closing server", "Running on local URL"):
        assert noise not in out + err
