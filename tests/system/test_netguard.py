"""`make test` refuses network access in every Python process it starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.system_parts import require

GUARD = Path(__file__).resolve().parents[1] / "netguard"

PROBE = """
import socket
try:
    socket.create_connection(("{host}", 80), timeout=2)
except PermissionError as error:
    print("BLOCKED", error)
except OSError as error:
    print("ALLOWED", type(error).__name__)
else:
    print("ALLOWED connected")
"""


def _probe(host: str, tmp_path: Path) -> tuple[str, str]:
    # Without the guard the probe would really connect: make sure it is there before trying.
    assert (GUARD / "sitecustomize.py").is_file(), f"no network guard at {GUARD}"
    log = tmp_path / "net.log"
    env = {**os.environ, "PYTHONPATH": str(GUARD), "COMPANION_NETGUARD_LOG": str(log)}
    out = subprocess.run([sys.executable, "-c", PROBE.format(host=host)], env=env,
                         capture_output=True, text=True, timeout=30).stdout
    return out, log.read_text() if log.exists() else ""


@pytest.mark.parametrize("host", ["203.0.113.7", "example.com", "10.1.2.3"])
def test_off_machine_connections_are_blocked_and_logged(host, tmp_path):
    out, log = _probe(host, tmp_path)
    assert out.startswith("BLOCKED"), out
    assert host in log


def test_loopback_is_allowed(tmp_path):
    out, log = _probe("127.0.0.1", tmp_path)
    assert out.startswith("ALLOWED") and log == ""


def test_this_process_runs_under_the_guard(tmp_path, monkeypatch):
    if "netguard" not in os.environ.get("PYTHONPATH", ""):
        require("the network guard", "tests/netguard is not on PYTHONPATH: run through `make test`, "
                "which installs the guard")
    # Log this deliberate attempt elsewhere: the run's own log must stay empty.
    monkeypatch.setenv("COMPANION_NETGUARD_LOG", str(tmp_path / "expected.log"))
    with pytest.raises(PermissionError):
        import socket

        socket.getaddrinfo("example.org", 443)
    assert "example.org" in (tmp_path / "expected.log").read_text()
