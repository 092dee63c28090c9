"""`make lab`: JupyterLab serves the repository root, so every relative link of the notebooks opens."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.system_parts import require

REPO = Path(__file__).resolve().parents[2]


def lab_flags() -> list[str]:
    """The flags `make lab` passes, read from the Makefile so that the test runs what users run."""
    match = re.search(r"^LAB_FLAGS := (.+)$", (REPO / "Makefile").read_text(), re.M)
    assert match, "the Makefile defines LAB_FLAGS"
    return match.group(1).split()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str, token: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def test_make_lab_opens_on_chapters_with_the_repository_root_served():
    flags = lab_flags()
    assert "--ServerApp.root_dir=." in flags and "--LabApp.default_url=/lab/tree/chapters" in flags
    recipe = re.search(r"^lab:.*\n\t(.+)$", (REPO / "Makefile").read_text(), re.M).group(1)
    assert "$(LAB_FLAGS)" in recipe and "--notebook-dir" not in recipe


@pytest.mark.slow
def test_lab_server_serves_notebooks_and_the_glossary(tmp_path):
    require("JupyterLab", None if importlib.util.find_spec("jupyterlab") else
            "the jupyterlab package is not installed (make install: requirements.txt)")
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_DATA_DIR": str(tmp_path / "data")}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", *lab_flags(), "--no-browser", "--allow-root",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "lab.log", "w"))
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                get(f"{base}/api/status", token)
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, (tmp_path / "lab.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the Lab server did not start in 90 s"
                time.sleep(0.5)
        notebook = get(f"{base}/api/contents/chapters/01_pytorch_basics.ipynb", token)
        assert notebook["type"] == "notebook" and notebook["content"]["cells"]
        # The link every notebook's first cell has: ../GLOSSARY.md, outside chapters/.
        assert "../GLOSSARY.md" in "".join(notebook["content"]["cells"][0]["source"])
        # type=file: jupytext (installed with the Lab) would otherwise offer the .md as a notebook.
        glossary = get(f"{base}/api/contents/GLOSSARY.md?type=file&format=text", token)
        assert glossary["type"] == "file" and "Glossary" in glossary["content"]
        assert get(f"{base}/api/contents/common/data.py?type=file", token)["type"] == "file"
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(f"{base}/api/contents/GLOSSARY.md", timeout=10)
        assert denied.value.code == 403  # the token is required
    finally:
        os.kill(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(server.pid, signal.SIGKILL)
            server.wait()
    assert server.returncode is not None
