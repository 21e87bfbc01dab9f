"""Runs first inside a local sandbox (standard library only, started with `python -I -S`).

It listens on the sandbox's own loopback at the endpoint's port and relays each
connection to the host endpoint through a Unix socket bound into the sandbox
(the sandbox has no other network), applies the rlimits it is given, runs the
command, and exits with its status (128+N when signal N killed it). Without
cgroups it also watches the sandbox (its PID namespace is all `/proc` shows):
over the memory or process limit it kills everything and exits with
MEMORY_EXIT or PIDS_EXIT, which the host reports as the limit hit.
"""

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

MEMORY_EXIT = 251
PIDS_EXIT = 252


def _pump(source: socket.socket, sink: socket.socket, done: threading.Barrier) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        try:
            if done.wait() == 0:  # both directions ended: the connection's sockets and slot go back
                source.close()
                sink.close()
        except threading.BrokenBarrierError:  # its other direction never started
            pass


_BUSY_BODY = json.dumps(
    {"error": {"message": "too many connections", "type": "server_error", "param": None, "code": "too_many_connections"}}
).encode()
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\nConnection: close\r\n\r\n".encode()
    + _BUSY_BODY
)
"""The answer to a connection past the cap (OpenAI's error shape: the relay does not know the dialect)."""


def _relay(server: socket.socket, unix_path: str, max_connections: int) -> None:
    """Relays each connection; past `max_connections` open at once, answers 503 (no threads, no host fds)."""
    slots = threading.BoundedSemaphore(max_connections)
    while True:
        try:
            conn, _ = server.accept()
        except OSError:  # out of fds: the program holds them; let it close some
            time.sleep(0.05)
            continue
        if not slots.acquire(blocking=False):
            try:
                conn.sendall(BUSY)
            except OSError:
                pass
            conn.close()
            continue
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(unix_path)
        except OSError:
            conn.close()
            upstream.close()
            slots.release()
            continue
        done = threading.Barrier(2, action=slots.release)
        try:
            threading.Thread(target=_pump, args=(conn, upstream, done), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, conn, done), daemon=True).start()
        except RuntimeError:  # the sandbox's process limit: the program holds the threads
            for sock in (conn, upstream):
                sock.close()
            done.abort()
            slots.release()


def _usage() -> tuple[int, int]:
    page = os.sysconf("SC_PAGE_SIZE")
    processes, rss = 0, 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            processes += 1
            try:
                with open(f"/proc/{entry}/statm") as file:
                    rss += int(file.read().split()[1]) * page
            except (OSError, IndexError, ValueError):
                pass
    return processes, rss


def _watch(memory_bytes: int, max_processes: int) -> None:
    while True:
        processes, rss = _usage()
        hit = None
        if rss > memory_bytes:
            hit = (MEMORY_EXIT, f"memory limit ({memory_bytes // 2**20} MiB)")
        elif processes > max_processes:
            hit = (PIDS_EXIT, f"process limit ({max_processes})")
        if hit is not None:
            os.kill(-1, signal.SIGKILL)  # every process of the sandbox but this one
            os.write(2, f"v1 sandbox: {hit[1]} exceeded; the sandbox's processes were killed\n".encode())
            os._exit(hit[0])
        time.sleep(0.05)


def main() -> int:
    with open(sys.argv[1]) as file:  # the spec's path (see local.LAUNCHER_SPEC)
        spec = json.load(file)
    for name, value in spec.get("rlimits", {}).items():
        limit = getattr(resource, "RLIMIT_" + name)
        resource.setrlimit(limit, (value, value))
    threading.stack_size(256 * 1024)
    for port, unix_path, max_connections in spec.get("forward", []):
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen(256)
        threading.Thread(target=_relay, args=(server, unix_path, max_connections), daemon=True).start()
    watch = spec.get("watch")
    if watch:
        threading.Thread(target=_watch, args=(watch["memory_bytes"], watch["max_processes"]), daemon=True).start()
    try:
        child = subprocess.Popen(spec["argv"], close_fds=True)
    except OSError as exc:
        sys.stderr.write(f"v1 sandbox: cannot run {spec['argv'][0]!r}: {exc}\n")
        return 127
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
