"""The Wireshark Lua dissector rendered from the protocol tables, and its CLI."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .render import render

__all__ = ["install", "plugin_path", "register_cli", "render"]


def plugin_path() -> Path:
    """Where Wireshark/tshark auto-load personal Lua plugins ($HOME respected)."""
    home = os.environ.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "lib" / "wireshark" / "plugins" / "dcpdissect.lua"


def install(path: Path | None = None) -> Path:
    """Write a fresh render to the personal plugin folder (or ``path``)."""
    path = Path(path) if path is not None else plugin_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render())
    return path


def _io_error(exc: OSError, path) -> int:
    """Every I/O error is one line and exit 2."""
    reason = exc.strerror or str(exc)
    print(f"dcpdissect: error: {exc.filename or path}: {reason}", file=sys.stderr)
    return 2


def cmd_generate(args) -> int:
    text = render()
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as exc:
            return _io_error(exc, args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_install(args) -> int:
    try:
        path = install(args.path)
    except OSError as exc:
        return _io_error(exc, args.path or plugin_path())
    print(f"installed the Lua dissector at {path}")
    print("Wireshark/tshark load it at start-up; it takes over TCP ports 11210 and 11209 "
          "(preference dcp.tcp_ports).")
    return 0


def register_cli(subparsers) -> None:
    """Add ``lua generate [-o PATH]`` and ``lua install`` to an argparse subparsers object."""
    p = subparsers.add_parser(
        "lua", help="the Wireshark Lua dissector (generate / install)",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog="examples:\n"
        "  dcpdissect lua install\n"
        "  dcpdissect lua generate -o dcpdissect.lua\n"
        "  tshark -X lua_script:dcpdissect.lua -r samples/resume-collapsed.pcap -Y "
        "'dcp.stream_req.start_seqno == 3'\n")
    sub = p.add_subparsers(dest="lua_command", required=True)
    g = sub.add_parser("generate", help="print the Lua dissector (or write it with -o)")
    g.add_argument("-o", "--output", metavar="PATH", help="write to PATH instead of stdout")
    g.set_defaults(func=cmd_generate)
    i = sub.add_parser("install", help="install into ~/.local/lib/wireshark/plugins/")
    i.add_argument("--path", type=Path, default=None,
                   help="install to this file instead of the personal plugin folder")
    i.set_defaults(func=cmd_install)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m dcpdissect.luagen``."""
    parser = argparse.ArgumentParser(prog="python -m dcpdissect.luagen")
    register_cli(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    return args.func(args)
