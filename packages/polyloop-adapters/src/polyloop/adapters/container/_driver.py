"""The program that runs inside the sandbox: one long-lived interpreter serving one session.

It is sent as the ``-c`` argument of ``python3 -u -I`` inside the sandbox, so it must run on the
sandbox's own Python (3.8 or newer) with the standard library alone, and it must not import
anything from PolyLoop. The host module reads this file's text; nothing imports it on the host.

Protocol, over the interpreter's original stdin and stdout (both moved to private descriptors
at start, so that code reading ``sys.stdin`` or writing to fd 1 cannot touch the protocol):
every frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON.

host -> sandbox  ``{"op": "exec", "id": N, "code": "..."}``
                 ``{"op": "interrupt", "id": N}`` (raise KeyboardInterrupt in action N)
                 ``{"op": "exit"}``
sandbox -> host  ``{"op": "ready", "python": "3.11.2", "pid": P, "uid": U}``
                 ``{"op": "result", "id": N, "output": "...", "dropped_chars": K,
                    "raised": bool, "interrupted": bool}``

The code's fd 1 and fd 2 both point at one pipe, so stdout and stderr (of the code, of its C
extensions and of its subprocesses) arrive in the order they were written. A drain thread keeps
the first ``cap`` characters and only counts the rest, so a print loop cannot fill the
sandbox's memory. When the protocol's input reaches end of file (the host is gone), the process
exits at once, whatever the code is doing.
"""

from __future__ import annotations

import ast
import codecs
import json
import linecache
import os
import signal
import struct
import sys
import threading
import traceback
from typing import Any

#: The file name the driver's own frames carry (it runs as ``python -c``).
DRIVER_FILENAME = "<string>"


def main() -> None:
    cap = int(sys.argv[1])
    session = sys.argv[2]
    memory = int(sys.argv[3])
    if memory > 0:
        # Also bound the interpreter's address space to the sandbox's memory limit, so that a
        # large allocation raises MemoryError (an observation) before the kernel's OOM killer
        # ends the whole sandbox (an environment failure).
        try:
            import resource

            _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            if hard == resource.RLIM_INFINITY or hard > memory:
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        except (ImportError, ValueError, OSError):
            pass
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    # The end-of-output marker goes through a private copy of the pipe's write end, so code
    # that closes or redirects fd 1 cannot break the protocol.
    marker_fd = os.dup(write_end)
    os.close(write_end)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    restore_streams(marker_fd, force=True)
    sys.path.insert(0, os.getcwd())

    marker = ("\x00polyloop-end-" + session + "\x00").encode()
    capture: dict[str, Any] = {"parts": [], "kept": 0, "dropped": 0}
    done = threading.Event()
    lock = threading.Lock()

    def drain() -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        pending = b""
        while True:
            chunk = os.read(read_end, 65536)
            if not chunk:
                return
            pending += chunk
            while True:
                at = pending.find(marker)
                if at < 0:
                    keep = max(0, len(pending) - len(marker) + 1)
                    take(decoder.decode(pending[:keep]))
                    pending = pending[keep:]
                    break
                take(decoder.decode(pending[:at]) + decoder.decode(b"", final=True))
                pending = pending[at + len(marker) :]
                done.set()

    def take(text: str) -> None:
        if not text:
            return
        with lock:
            room = cap - capture["kept"]
            if room > 0:
                capture["parts"].append(text[:room])
                capture["kept"] += min(room, len(text))
            if len(text) > room:
                capture["dropped"] += len(text) - max(room, 0)

    def collect() -> tuple[str, int]:
        for stream in (sys.stdout, sys.stderr):
            try:  # noqa: SIM105 (the driver keeps its imports minimal)
                stream.flush()
            except Exception:
                pass
        done.clear()
        write_all(marker_fd, marker)
        done.wait()
        with lock:
            output = "".join(capture["parts"])
            dropped = capture["dropped"]
            capture["parts"] = []
            capture["kept"] = 0
            capture["dropped"] = 0
        return output, dropped

    def read_exact(n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            chunk = os.read(proto_in, n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def send(message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        write_all(proto_out, struct.pack(">I", len(body)) + body)

    main_thread = threading.main_thread().ident or 0
    jobs: list[dict[str, Any]] = []
    current: dict[str, Any] = {"id": None}
    wake = threading.Condition()

    def reader() -> None:
        while True:
            head = read_exact(4)
            body = read_exact(struct.unpack(">I", head)[0]) if head else None
            if body is None:
                # The host is gone: stop everything now, whatever the code is doing.
                os._exit(0)
            message = json.loads(body.decode())
            if message.get("op") == "interrupt":
                if current["id"] == message.get("id"):
                    signal.pthread_kill(main_thread, signal.SIGINT)
                continue
            with wake:
                jobs.append(message)
                wake.notify()

    threading.Thread(target=drain, daemon=True).start()
    threading.Thread(target=reader, daemon=True).start()
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    send({"op": "ready", "python": sys.version.split()[0], "pid": os.getpid(), "uid": os.getuid()})

    while True:
        with wake:
            while not jobs:
                wake.wait()
            message = jobs.pop(0)
        if message.get("op") == "exit":
            os._exit(0)
        if message.get("op") != "exec":
            continue
        restore_streams(marker_fd, force=False)
        try:
            result = run(message, namespace, current)
        except KeyboardInterrupt:
            # An interrupt that raced with the end of the code: the code itself has finished.
            result = {"raised": False, "interrupted": False}
        current["id"] = None
        while True:
            try:
                output, dropped = collect()
                break
            except KeyboardInterrupt:
                continue
        result.update(op="result", id=message["id"], output=output, dropped_chars=dropped)
        send(result)


def run(
    message: dict[str, Any], namespace: dict[str, Any], current: dict[str, Any]
) -> dict[str, Any]:
    action_id = message["id"]
    filename = "<action-" + str(action_id) + ">"
    source = message["code"]
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    raised = False
    interrupted = False
    current["id"] = action_id
    try:
        tree = ast.parse(source, filename, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, filename, "eval"), namespace)
            if value is not None:
                print(repr(value))
    except KeyboardInterrupt:
        current["id"] = None
        raised = True
        interrupted = True
        report()
    except BaseException:
        current["id"] = None
        raised = True
        report()
    current["id"] = None
    return {"raised": raised, "interrupted": interrupted}


def restore_streams(fd: int, force: bool) -> None:
    """Point fds 1 and 2 at the capture pipe again and reopen closed ``sys`` streams.

    Code may close or redirect them; the next action must still have its output captured.
    """
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    for name, number in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if force or stream is None or getattr(stream, "closed", True):
            fresh = open(number, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
            fresh.reconfigure(write_through=True)
            setattr(sys, name, fresh)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def report() -> None:
    kind, value, tb = sys.exc_info()
    # Drop the driver's own frame: the model should see only its code.
    while tb is not None and tb.tb_frame.f_code.co_filename == DRIVER_FILENAME:
        tb = tb.tb_next
    sys.stderr.write("".join(traceback.format_exception(kind, value, tb)))


main()
