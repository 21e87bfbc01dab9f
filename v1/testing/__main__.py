"""`python -m v1.testing [--reply NAME_OR_MODULE:FUNCTION] ...`: run the mock model server until killed.

Prints the server's base URL (ending in ``/v1``) on the first line of stdout,
then serves until SIGINT or SIGTERM. ``--reply`` picks the responder: a built-in
name (``echo``, ``reverse``, ``imperfect-reverse``, ``tool-call``,
``fail-STATUS``) or a ``module:function`` taking a `MockRequest` and returning a
`Reply` or a string.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from v1._util.descriptors import raise_descriptor_limit
from v1.config import resolve_callable
from v1.errors import ConfigError
from v1.testing._mock_server import MockModelServer, MockRequest, Reply
from v1.testing._responders import BUILT_IN, ReplyFunction, built_in, requiring_key, serving_only


def responder_from(name: str) -> ReplyFunction:
    """A built-in responder by name, or the function a ``module:function`` reference names.

    Raises:
        ConfigError: neither a built-in name nor an importable callable.
    """
    found = built_in(name)
    if found is not None:
        return found
    if ":" not in name:
        known = ", ".join([*BUILT_IN, "fail-STATUS"])
        raise ConfigError(f"--reply {name!r}: not a built-in responder ({known}) nor a 'module:function' reference")
    return resolve_callable(name, "--reply")


def delayed(responder: ReplyFunction, seconds: float) -> ReplyFunction:
    async def reply(request: MockRequest) -> Any:
        answer = responder(request)
        if hasattr(answer, "__await__"):
            answer = await answer
        answer = Reply.text(answer) if isinstance(answer, str) else answer
        answer.delay = max(answer.delay, seconds)
        return answer

    return reply


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m v1.testing",
        description="Run v1's mock model server (OpenAI Chat Completions, Completions, Responses and Anthropic Messages) "
        "with a scripted responder; prints its base URL, then serves until killed.",
    )
    parser.add_argument(
        "--reply",
        default="echo",
        metavar="NAME_OR_REF",
        help=f"responder: {', '.join(BUILT_IN)}, fail-STATUS (e.g. fail-503), or module:function (default echo)",
    )
    parser.add_argument("--model", default="mock-model", help="the model name it serves and lists (default mock-model)")
    parser.add_argument("--strict-model", action="store_true", help="answer 404 'model not found' for other model names")
    parser.add_argument("--api-key", default=None, metavar="KEY", help="answer 401 unless requests bear this API key")
    parser.add_argument("--delay", type=float, default=0.0, metavar="SECONDS", help="wait before each reply")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        responder = responder_from(args.reply)
    except ConfigError as exc:
        print(f"python -m v1.testing: error: {exc}", file=sys.stderr)
        return 2
    if args.delay < 0:
        print(f"python -m v1.testing: error: --delay must be 0 or more seconds, got {args.delay}", file=sys.stderr)
        return 2
    if args.delay:
        responder = delayed(responder, args.delay)
    if args.strict_model:
        responder = serving_only(args.model, responder)
    if args.api_key is not None:
        responder = requiring_key(args.api_key, responder)
    raise_descriptor_limit()  # each connection it holds is a descriptor: thousands in flight pass a soft limit of 1024
    try:
        server = MockModelServer(responder, model=args.model, host=args.host, port=args.port, keep_requests=False).start()
    except OSError as exc:
        print(f"python -m v1.testing: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(server.url, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
