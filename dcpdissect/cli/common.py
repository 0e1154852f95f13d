"""What every subcommand shares: exit codes, argument types, capture options, live output
and one-line errors."""

from __future__ import annotations

import argparse
import sys

from ..protocol import OPCODE_NAMES
from ..reassembly.pdus import Options

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2
FAIL_ON = ("error", "warning", "info", "never")
INTERRUPTED = ("dcpdissect: interrupted: stopped reading; the results cover the input "
               "read so far")


def parse_opcode(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        pass
    wanted = text.replace("-", "").replace("_", "").lower()
    for code, name in OPCODE_NAMES.items():
        if name.lower() == wanted or name.lower() == "dcp" + wanted:
            return code
    raise argparse.ArgumentTypeError(f"unknown opcode {text!r}")


def checked_opcode(text: str) -> int:
    code = parse_opcode(text)
    if not 0 <= code <= 0xFF:
        raise argparse.ArgumentTypeError(f"opcode {text!r} out of range (0x00-0xff)")
    return code


def _int_in(lo: int, hi: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} {text!r} is not a number") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{what} {text!r} out of range ({lo}-{hi})")
        return value
    parse.__name__ = what
    return parse


parse_port = _int_in(1, 65535, "port")
parse_vbucket = _int_in(0, 65535, "vbucket")
parse_connection = _int_in(1, (1 << 31) - 1, "connection")


def _list_of(parse):
    """``N[,M...]`` -> [N, M, ...], each through ``parse`` (for ``action="extend"``)."""
    def parse_list(text: str) -> list[int]:
        return [parse(part.strip()) for part in text.split(",")]
    parse_list.__name__ = parse.__name__
    return parse_list


vbucket_list = _list_of(parse_vbucket)
connection_list = _list_of(parse_connection)


def live_output(path: str) -> None:
    """Live input (stdin): every line of output leaves at once."""
    if path == "-":
        try:
            sys.stdout.reconfigure(line_buffering=True)
        except (AttributeError, ValueError):
            pass


class LiveTable:
    """A table written row by row (live input): the header once, columns as wide as the
    header and first row, widened when a later cell is longer."""

    def __init__(self, out, headers):
        self.out, self.headers, self.widths = out, [str(h) for h in headers], None

    def _line(self, cells) -> None:
        last = len(cells) - 1
        self.out.write("  ".join(c if i == last else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(cells, self.widths))).rstrip()
                       + "\n")

    def row(self, cells) -> None:
        cells = [str(c) for c in cells]
        if self.widths is None:
            self.widths = [max(len(h), len(c)) for h, c in zip(self.headers, cells)]
            self._line(self.headers)
            self._line(["-" * w for w in self.widths])
        else:
            self.widths = [max(w, len(c)) for w, c in zip(self.widths, cells)]
        self._line(cells)


def add_fail_on_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fail-on", choices=FAIL_ON, default="error",
                   help="exit 1 when a finding at or above this severity exists (default: error)")


SEVERITIES = ("info", "warning", "error")


def add_min_severity_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--min-severity", choices=SEVERITIES, default="info",
                   help="report only findings at or above this severity, in every format "
                        "(default: info, all)")


def at_least(findings, min_severity: str) -> list:
    """The findings at or above ``min_severity``."""
    from ..analysis.rules import SEVERITY_RANK
    threshold = SEVERITY_RANK[min_severity]
    return [f for f in findings if SEVERITY_RANK[f.severity] >= threshold]


def fails(findings, fail_on: str) -> bool:
    """Whether a finding is at or above the ``--fail-on`` severity."""
    return fail_on != "never" and bool(at_least(findings, fail_on))


class _CaptureFiles(argparse.Action):
    """The ``file`` arguments as one capture: ``-`` (stdin), one file, or a
    :class:`~dcpdissect.capture.fileset.FileSet` of several files, directories and globs."""

    def __call__(self, parser, namespace, values, option_string=None):
        from ..capture.fileset import FileSet, capture_files
        if "-" in values and len(values) > 1:
            parser.error("stdin (-) is read alone, not with other files")
        paths = capture_files(values) or values     # (a directory without any: its error)
        setattr(namespace, self.dest, paths[0] if len(paths) == 1 else FileSet(paths))


def add_file_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="+", action=_CaptureFiles, metavar="FILE",
                   help="pcap or pcapng file (gzip allowed), or - for stdin; several files, "
                        "directories or globs of one capture point (ring-buffer files) are "
                        "read as one capture, their frames merged in time order")


def add_capture_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=parse_port, action="append", default=[], metavar="N",
                   help="also decode TCP port N as MCBP (11210 and 11209 always are)")
    p.add_argument("--any-port", action="store_true",
                   help="also report the TCP connections whose bytes are not MCBP (one "
                        "connections-not-mcbp finding, by port); off 11210, 11209 and --port, "
                        "a connection is decoded only when its bytes prove it MCBP either way")
    add_vxlan_option(p)
    p.add_argument("--tls-keylog", type=keylog_text, metavar="FILE",
                   help="decrypt TLS connections with this key log (NSS format, SSLKEYLOGFILE)")


def add_vxlan_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vxlan-port", type=parse_port, action="append", default=[], metavar="N",
                   help="also read UDP port N as VXLAN (4789 always is; e.g. 8472 for "
                        "Linux's and flannel's default)")


def add_time_option(p: argparse.ArgumentParser) -> None:
    from ..reports.messages import TIME_MODES
    p.add_argument("--time", choices=TIME_MODES, default="absolute",
                   help="table times: absolute (ISO 8601, UTC, default), relative (seconds "
                        "since the capture's first frame) or delta (since the previous row)")


def add_output_option(p: argparse.ArgumentParser, what: str = "the results") -> None:
    p.add_argument("-o", "--output", metavar="FILE",
                   help=f"write {what} to FILE instead of stdout (progress and notes stay "
                        "on stderr)")


def open_output(path: str | None):
    """Where the results go: stdout, or the file of ``-o`` (None: it cannot be opened,
    said on stderr)."""
    if not path or path == "-":
        return sys.stdout
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        print(f"dcpdissect: error: --output {os_error(exc)}", file=sys.stderr)
        return None


def close_output(out) -> None:
    """The results are written: flush stdout, or close the file of ``-o``."""
    out.flush()
    if out is not sys.stdout:
        out.close()


def write_jsonl(args, summary, records, out) -> None:
    """``records`` as JSON lines, then the error record of a capture read only in part."""
    from ..reports.messages import jsonl_line
    for r in records:
        out.write(jsonl_line(r))
    if summary.error:
        error_record(args, summary, summary.error, out)


def end_of_run(summary, run) -> int:
    """After the results, on stderr: the capture's notes, an interruption, a fault (exit
    2), the ports the heuristic found (exit 2 when no MCBP was). The exit code."""
    capture_notes(summary)
    if run.interrupted:
        print(INTERRUPTED, file=sys.stderr)
    if summary.error:
        print(f"dcpdissect: error: {summary.error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return ports_report(summary) or EXIT_OK


def keylog_text(path: str) -> str:
    """``--tls-keylog FILE``: the key log's text (it travels with the options)."""
    from ..capture.keylog import read_keylog
    try:
        return read_keylog(path)
    except OSError as exc:
        raise argparse.ArgumentTypeError(os_error(exc)) from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def with_examples(*commands: str) -> dict:
    """``add_parser`` keywords for an ``examples:`` epilog, one command a line, kept as
    written (each runs from the repository's root: the samples are there)."""
    return {"epilog": "examples:\n" + "".join(f"  {c}\n" for c in commands),
            "formatter_class": argparse.RawDescriptionHelpFormatter}


def add_progress_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal and the "
                        "capture is 20 MB or more)")


def capture_options(args, tcp_streams=None) -> Options:
    return Options(ports=tuple(args.port), any_port=args.any_port,
                   tls_keylog=getattr(args, "tls_keylog", None) or "",
                   vxlan_ports=tuple(args.vxlan_port), tcp_streams=tcp_streams)



def run_pass(args, observers, summary, label: str = "", progress: bool | None = False,
             tcp_streams=None):
    """One analysis pass of ``observers`` over ``args.file``, interruptible by SIGINT: in
    batches, or message by message from stdin; a progress bar labelled ``label`` on stderr as
    ``progress`` (``--[no-]progress``) asks; ``tcp_streams`` (a
    :class:`~dcpdissect.reassembly.tcp_streams.TcpStreams`) fed every TCP segment. Returns
    the finished :class:`Pass`."""
    from ..analysis.findings import MAX_FINDINGS_PER_RULE
    from ..analysis.session import Pass
    from ..reassembly.batches import BATCH
    from ..reassembly.pdus import iter_events
    from ..reports.progress import Progress

    bar = Progress.from_option(label, progress)
    try:
        run = Pass(observers, MAX_FINDINGS_PER_RULE, batch=1 if args.file == "-" else BATCH,
                   progress=bar, interruptible=True)
        run.run(iter_events(args.file, capture_options(args, tcp_streams), summary,
                            bar.attach))
    finally:
        bar.close()
    return run


def error_record(args, summary, text: str, out=None) -> None:
    """The jsonl record of a capture that could not be read (wholly or from a frame on);
    ``ts_ns`` is the time of the last frame read (None: none was)."""
    from ..reports.messages import jsonl_line
    (out or sys.stdout).write(jsonl_line({"type": "error", "ts_ns": summary.last_ts_ns,
                                          "file": str(args.file), "error": text}))


def not_decoded(args, summary, jsonl: bool, out=None) -> int | None:
    """When nothing of the capture was decoded (a fault before its first message, or no
    MCBP in it): no result, since none was computed: in jsonl one ``error`` record on
    stdout, otherwise nothing; one line on stderr; exit 2. None when messages were decoded."""
    if summary.pdus or not (summary.error or summary.no_mcbp):
        return None
    text = summary.error or summary.no_mcbp_hint().removeprefix("dcpdissect: ")
    if jsonl:
        error_record(args, summary, text, out)
    print(f"dcpdissect: error: {text}", file=sys.stderr)
    return EXIT_BAD_INPUT


def capture_notes(summary) -> None:
    """What the capture held that was not used as it stands, on stderr."""
    for line in summary.notes():
        print(line, file=sys.stderr)


def ports_report(summary) -> int:
    """Name the ports found by the heuristic; exit 2 when no MCBP was found."""
    if summary.port_note():
        print(summary.port_note(), file=sys.stderr)
    if summary.no_mcbp:
        print(summary.no_mcbp_hint(), file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK



def os_error(exc: OSError) -> str:
    """``path: reason`` of an OSError, without Python's errno decoration."""
    reason = exc.strerror or str(exc)
    return f"{exc.filename}: {reason}" if exc.filename else reason



class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one ``dcpdissect: error:`` line and exit 2;
    subcommand parsers are of the same class."""

    def error(self, message):
        self.exit(EXIT_BAD_INPUT,
                  f"dcpdissect: error: {message} (see '{self.prog} --help')\n")



def parse_follow(text: str) -> dict:
    """``vb:N[,sid:M][,conn:K]`` (``--follow``) -> {"vb": N, "sid": M, "conn": K}."""
    limits = {"vb": (0, 0xFFFF), "sid": (0, 0xFFFF), "conn": (1, (1 << 31) - 1)}
    spec: dict = {}
    for part in text.split(","):
        name, _, value = part.strip().partition(":")
        if name not in limits or name in spec:
            raise argparse.ArgumentTypeError(f"{text!r}: expected vb:N[,sid:M][,conn:K]")
        spec[name] = _int_in(*limits[name], name)(value)
    if "vb" not in spec:
        raise argparse.ArgumentTypeError(f"{text!r}: vb:N is required")
    return spec


def parse_instant(text: str):
    """``--from``/``--to``: seconds after the capture's first frame (``2.5``), or an ISO 8601
    time (``2026-11-24T10:22:13.05Z``; UTC when no offset is given). Returns ("relative",
    ns) or ("absolute", ns since the epoch)."""
    import datetime as dt
    from decimal import Decimal, InvalidOperation
    try:
        return "relative", int(Decimal(text) * 1_000_000_000)
    except (InvalidOperation, ValueError, OverflowError):
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"time {text!r}: give seconds after the first frame (e.g. 2.5) or an ISO 8601 "
            "time (e.g. 2026-11-24T10:22:13.05Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    delta = when - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return "absolute", (delta.days * 86400 + delta.seconds) * 1_000_000_000 \
        + delta.microseconds * 1000


class TimeWindow:
    """``--from``/``--to`` of a capture: whether a frame time lies in the window (bounds
    included); relative bounds count from ``summary.first_ts_ns``."""

    def __init__(self, start, end, summary):
        self.start, self.end, self.summary = start, end, summary

    def __bool__(self) -> bool:
        return self.start is not None or self.end is not None

    def _ns(self, bound) -> int:
        kind, ns = bound
        return ns + (self.summary.first_ts_ns or 0) if kind == "relative" else ns

    def contains(self, ts_ns: int) -> bool:
        return ((self.start is None or ts_ns >= self._ns(self.start))
                and (self.end is None or ts_ns <= self._ns(self.end)))
