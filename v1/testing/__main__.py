"""`python -m v1.testing [--port N] [--delay S]`: run the mock model server (echo replies) until killed."""

from __future__ import annotations

import argparse
import signal
import threading

from v1.testing.mock_server import MockModelServer, Reply, echo


def main() -> None:
    parser = argparse.ArgumentParser(description="Run v1's mock OpenAI-compatible model server (echoes the last user message).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to wait before each reply")
    args = parser.parse_args()
    responder = echo if not args.delay else (lambda request: Reply.text(request.last_user_text, delay=args.delay))
    server = MockModelServer(responder, host=args.host, port=args.port).start()
    print(server.url, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop()


if __name__ == "__main__":
    main()
