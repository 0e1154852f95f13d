"""Command line: ``dcpdissect SUBCOMMAND``; each subcommand is a module of this package
with a ``register(subparsers)`` function."""

from __future__ import annotations

import os
import sys

from .. import __version__
from .common import EXIT_BAD_INPUT, EXIT_OK, OneLineParser, os_error


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="dcpdissect",
                           description="Dissect and analyse Couchbase DCP captures.")
    parser.add_argument("--version", action="version", version=f"dcpdissect {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    from ..luagen import register_cli as register_lua
    from . import analyze, connections, dissect, nodes, pipeline, rollback_check, streams
    for module in (dissect, analyze, streams, connections, rollback_check, nodes):
        module.register(sub)
    register_lua(sub)
    pipeline.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_BAD_INPUT if exc.code else EXIT_OK
    try:
        return args.func(args)
    except BrokenPipeError:
        # The reader went away (``| head``): end quietly. Point stdout at /dev/null so the
        # interpreter's final flush does not complain either.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK
    except KeyboardInterrupt:
        print("dcpdissect: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:          # any other I/O error: one line, exit 2
        print(f"dcpdissect: error: {os_error(exc)}", file=sys.stderr)
