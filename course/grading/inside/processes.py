"""The judge's helper processes, inside the sandbox: the zygote and the templates it forks.

The judge (``judge``) forks the zygote before it reads any request. The zygote imports what the
setup cells import (``preload``) and then only forks: a template per submission, on the judge's
word. A template runs the setup cells of its submission and forks one checker per exercise
(``checker``), which forks the answer process. Neither ever holds a check cell: the judge
passes each check cell straight to its checker through a pipe.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import select
import signal
import socket
import types
from pathlib import Path

from course.grading.inside.answer import settle_imports
from course.grading.inside.cells import run_cell
from course.grading.inside.checker import checker_process

#: Seconds the zygote gets to fork a template, and a template to answer a ping.
PING_SECONDS = 10.0


class Template:
    """The judge's end of the template process, which runs the setup cells and forks the checkers.

    The judge reads each check cell (from the grader) to pass it on, so its memory holds the
    checks of every exercise so far, freed but not erased: an answer forked from it could read
    them in its own memory. So the templates come from a zygote forked before the judge read any
    request, and a template never holds a check cell: it runs the setup cells, and for each exercise the judge sends it
    the request and three pipe ends, and it forks the checker (which forks the answer process).
    The check cell goes from the judge to the checker through a pipe; the template tells the
    judge the checker's pid and, when it has ended, its wait status.
    """

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self.sock, self.pid = sock, pid
        self.buffer = b""

    def alive(self, timeout: float = PING_SECONDS) -> bool:
        """Whether the template still answers (an answer may have stopped or killed it)."""
        try:
            self._send(b"P", {})
            return self.line(timeout) == "pong"
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        """Kill the template (the zygote reaps it) and close its socket."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.sock.close()


    def _send(self, kind: bytes, request: dict, fds: tuple[int, ...] = ()) -> None:
        data = json.dumps(request).encode()
        socket.send_fds(self.sock, [kind + len(data).to_bytes(8, "big")], list(fds))
        self.sock.sendall(data)

    def setup(self, request: dict) -> str | None:
        """Run one setup cell in the template; the error it raised, if any."""
        try:
            self._send(b"S", request)
            return json.loads(self.line(None) or "{}").get("error")
        except (OSError, ValueError) as error:
            return f"the template process failed ({error})"

    def start(self, request: dict, fds: tuple[int, int, int]) -> int | None:
        """Fork the checker for ``request`` with its pipe ends; its pid (None: no template)."""
        try:
            self._send(b"E", request, fds)
            line = self.line(None)
        except OSError:
            return None
        return int(line.split()[1]) if line and line.startswith("pid ") else None

    def line(self, timeout: float | None) -> str | None:
        """The template's next line, or None if none came within ``timeout`` seconds."""
        while b"\n" not in self.buffer:
            if timeout is not None and not select.select([self.sock], [], [], timeout)[0]:
                return None
            chunk = self.sock.recv(4096)
            if not chunk:
                raise OSError("the template process ended")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


class Zygote:
    """The judge's end of the zygote, which forks a fresh template per submission and runs nothing.

    It is forked before the judge reads any request, so no template holds a check cell or
    another submission's answers.
    """

    def __init__(self, module: types.ModuleType, limits: dict, io: tuple) -> None:
        ours, theirs = socket.socketpair()
        self.pid = os.fork()
        if self.pid == 0:
            ours.close()
            for fd in (f.fileno() for f in io):
                os.close(fd)
            _zygote(theirs, module, limits)
        theirs.close()
        self.sock = ours

    def template(self, timeout: float = PING_SECONDS) -> Template | None:
        """A fresh template, or None if the zygote did not fork one within ``timeout`` seconds."""
        ours, theirs = socket.socketpair()
        try:
            socket.send_fds(self.sock, [b"T"], [theirs.fileno()])
            theirs.close()
            if not select.select([self.sock], [], [], timeout)[0]:
                return None
            line = self.sock.recv(64).decode()
            pid = int(line.split()[1]) if line.startswith("pid ") and line.endswith("\n") else None
        except (OSError, ValueError, IndexError):
            return None
        return Template(ours, pid) if pid else None


def preload(names: list[str]) -> None:
    """Import the modules the setup cells import (the grader names them), once for every template.

    Only modules found outside the working copy (the repository's packages, the venv's): one the
    setup cells write into the working copy, or find there, is theirs to import. A checkout below
    the host's ``/tmp`` is bound into the working copy read-only, on a file system of its own: its
    modules are the repository's. One that fails is left to its setup cell, which reports it.
    """
    here = Path.cwd().resolve()
    for name in names:
        try:
            spec = importlib.util.find_spec(name.partition(".")[0])
            if spec is None or not spec.origin or _in_working_copy(Path(spec.origin).resolve(), here):
                continue
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the setup cell that imports it says why
            continue
    settle_imports()


def _in_working_copy(path: Path, here: Path) -> bool:
    """Whether ``path`` lies in the working copy ``here`` on its own (writable) file system."""
    return path.is_relative_to(here) and path.stat().st_dev == here.stat().st_dev


def _zygote(sock: socket.socket, module: types.ModuleType, limits: dict) -> None:
    """The zygote process: forks a template per ``T`` message (with its socket); never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the templates it forks are reaped for it
    preload([str(name) for name in limits.get("preload", [])])
    try:
        while True:
            message, fds, _, _ = socket.recv_fds(sock, 1, 1)
            if message != b"T" or len(fds) != 1:
                break
            pid = os.fork()
            if pid == 0:
                sock.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the template waits for its checkers
                _template(socket.socket(fileno=fds[0]), module, limits)
            os.close(fds[0])
            sock.sendall(f"pid {pid}\n".encode())
    except (OSError, ValueError):
        pass
    finally:
        os._exit(0)

def _receive(sock: socket.socket) -> tuple[bytes, dict, list[int]] | None:
    header, fds, _, _ = socket.recv_fds(sock, 9, 3)
    while 0 < len(header) < 9:
        chunk = sock.recv(9 - len(header))
        if not chunk:
            return None
        header += chunk
    if not header:
        return None
    size, data = int.from_bytes(header[1:], "big"), b""
    while len(data) < size:
        chunk = sock.recv(min(1 << 20, size - len(data)))
        if not chunk:
            return None
        data += chunk
    return header[:1], json.loads(data.decode()), fds


def _template(sock: socket.socket, module: types.ModuleType, limits: dict) -> None:
    """The template process: runs the setup cells, forks one checker per exercise; never returns."""
    try:
        while (message := _receive(sock)) is not None:
            kind, request, fds = message
            if kind == b"P":
                sock.sendall(b"pong\n")
                continue
            if kind == b"S":
                error = run_cell(request["code"], module.__dict__, f"<setup cell {request['index']}>", limits)
                sock.sendall((json.dumps({"error": error}) + "\n").encode())
                continue
            if kind != b"E" or len(fds) != 3:
                break
            settle_imports()  # here, not in every answer process
            pid = os.fork()
            if pid == 0:
                sock.close()
                checker_process(request, module, limits, tuple(fds))
            for fd in fds:
                os.close(fd)
            sock.sendall(f"pid {pid}\n".encode())
            status = os.waitpid(pid, 0)[1]
            sock.sendall(f"status {status}\n".encode())
    except (OSError, ValueError):
        pass
    finally:
        os._exit(0)
