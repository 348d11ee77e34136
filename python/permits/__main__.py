"""Command line of permits: ``python -m permits demo [--plot FILE] [--seconds S] [--http]`` and
``python -m permits shm list|show NAME|unlink NAME``.

Exit status: 0 done; 1 a failure (the demo could not write its plot; a segment missing, foreign or
damaged); 2 a usage error, or an optional dependency the command needs is not installed (the message
names the extra: ``pip install "permits[plot]"``); 130 interrupted.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    if value > 3600:
        raise argparse.ArgumentTypeError(f"at most 3600 seconds: {text!r}")
    return value


def _version() -> str:
    from importlib.metadata import version

    return version("permits")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m permits",
        description="permits: rate limiting with a lock-free C++ engine.",
    )
    parser.add_argument("--version", action="version", version=f"permits {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="live side-by-side demo of the limiters on bursty traffic",
        description=(
            "Offer the same bursty traffic to a token bucket, a fixed window, a sliding "
            "window and a sliding window counter (and a token bucket with a queue, served "
            "with wait_async), each admitting about 10 requests per second, and show live "
            "how many each one grants, rejects and queues."
        ),
    )
    demo.add_argument(
        "--seconds",
        type=_seconds,
        default=5.0,
        metavar="S",
        help="how long the demo runs (default: 5)",
    )
    demo.add_argument(
        "--plot",
        metavar="FILE",
        default=None,
        help="also write the granted rate over time of each limiter to FILE (PNG, needs matplotlib)",
    )
    demo.add_argument(
        "--concurrency",
        action="store_true",
        help="add a concurrency limiter (3 at once, each request holding its permit 0.25 s)",
    )
    demo.add_argument(
        "--http",
        action="store_true",
        help=(
            "instead: a FastAPI app with the rate-limit middleware under uvicorn on loopback, driven by "
            "an async httpx client (needs fastapi, uvicorn and httpx)"
        ),
    )
    demo.add_argument(
        "--adaptive",
        action="store_true",
        help=(
            "instead: a permits.AdaptiveLimiter learning a server's hidden limit (10, then 20, then 5 a "
            "second) from its 429s, on a ManualClock; with --plot, its rate over time"
        ),
    )
    demo.add_argument(
        "--simulate",
        action="store_true",
        help="run on a ManualClock as fast as possible instead of in real time (no live display)",
    )
    _add_shm(commands)
    return parser


def _add_shm(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    shm = commands.add_parser(
        "shm",
        help="list, show or remove the shared-memory segments of permits.shm on this host",
        description=(
            "The segments of permits.shm.SharedMemoryStore in /dev/shm: list them, show one's limiters "
            "(spec, permits available now), the processes holding its concurrency permits (alive or dead) "
            "and its free room, or remove one. Reads never create or change a segment."
        ),
    )
    actions = shm.add_subparsers(dest="shm_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the segments: name, size, limiters, holders, mode, owner")
    listing.add_argument("--json", action="store_true", help="as JSON, for scripts")
    show = actions.add_parser("show", help="one segment's limiters, holders and free room")
    show.add_argument("name", metavar="NAME", help="the segment's name (its file is /dev/shm/permits.NAME)")
    show.add_argument("--json", action="store_true", help="as JSON, for scripts")
    unlink = actions.add_parser("unlink", help="remove a segment (processes that have it open keep it)")
    unlink.add_argument("name", metavar="NAME", help="the segment's name")


def _run_shm(args: argparse.Namespace) -> int:
    from permits._cli import shm

    if args.shm_command == "list":
        return shm.list_segments(as_json=args.json)
    if args.shm_command == "show":
        return shm.show_segment(args.name, as_json=args.json)
    return shm.unlink_segment(args.name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "demo":
        if args.http:
            if args.plot or args.concurrency or args.simulate or args.adaptive:
                parser.error("--http runs on its own: without --plot, --concurrency, --simulate or --adaptive")
            from permits.demo.http import run_http_demo

            return run_http_demo(seconds=args.seconds)
        if args.adaptive:
            if args.concurrency or args.simulate:
                parser.error("--adaptive runs on its own (simulated): without --concurrency or --simulate")
            from permits.demo.adaptive import run_adaptive_demo

            return run_adaptive_demo(plot=args.plot)
        from permits.demo import run_demo

        return run_demo(
            seconds=args.seconds,
            plot=args.plot,
            concurrency=args.concurrency,
            simulate=args.simulate,
        )
    if args.command == "shm":
        return _run_shm(args)
    parser.error(f"unknown command {args.command!r}")  # argparse already rejects these
    return 2


if __name__ == "__main__":
    sys.exit(main())
