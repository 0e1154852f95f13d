"""``dcpdissect pipeline``: the ``analyze`` run over many or large captures on Spark.

The stages live in :mod:`.core` (engine-agnostic), the Spark driver in :mod:`.spark`,
record-aligned chunking in :mod:`.chunks`. ``register_cli(subparsers)`` adds the
subcommand; pyspark is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["add_arguments", "cmd_pipeline", "register_cli"]

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2
FAIL_ON = ("error", "warning", "info", "never")


def keylog_text(path: str) -> str:
    from ..cli.common import keylog_text as read
    return read(path)


def _size(text: str) -> int:
    from .chunks import parse_size
    try:
        return parse_size(text)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 256MB, 64KB, 1000000)") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..cli.common import add_vxlan_option, parse_port
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="capture files, directories (searched recursively) or globs")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output directory (or URI) for the Parquet tables")
    p.add_argument("--master", default=None,
                   help="Spark master (default local[*]); a non-local master gets the package shipped")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting, e.g. spark.driver.memory=4g (repeatable)")
    p.add_argument("--chunk-size", type=_size, default="256MB", metavar="SIZE",
                   help="split uncompressed captures into record-aligned chunks of about SIZE")
    p.add_argument("--report", metavar="FILE", help="also write the Markdown report to FILE")
    p.add_argument("--fail-on", choices=FAIL_ON, default="error",
                   help="exit 1 when a finding at or above this severity exists (default: error)")
    p.add_argument("--port", type=parse_port, action="append", default=[], metavar="N",
                   help="also decode TCP port N as MCBP (11210 and 11209 always are)")
    p.add_argument("--any-port", action="store_true",
                   help="also report the TCP connections whose bytes are not MCBP (one "
                        "connections-not-mcbp finding, by port); off 11210, 11209 and --port, "
                        "a connection is decoded only when its bytes prove it MCBP either way")
    add_vxlan_option(p)
    p.add_argument("--tls-keylog", type=keylog_text, metavar="FILE",
                   help="decrypt TLS connections with this key log (its text travels to the "
                        "executors with the options)")


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add ``pipeline`` to the ``dcpdissect`` subcommands."""
    p = subparsers.add_parser("pipeline", help="analyse many or large captures on Spark, "
                                               "writing Parquet tables",
                              description="Runs the analyze pipeline on Spark and writes the "
                                          "messages, findings, connections, streams, errors "
                                          "and files tables under --out.",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog="examples:\n"
                              "  dcpdissect pipeline samples/resume-collapsed.pcap "
                              "samples/rollback-correct.pcap --out tables --report report.md\n")
    add_arguments(p)
    p.set_defaults(func=cmd_pipeline)
    return p


def _markdown():
    try:
        from ..reports.markdown import markdown_report
    except ImportError:
        return None
    return markdown_report


def cmd_pipeline(args) -> int:
    from ..analysis.rules import SEVERITY_RANK
    from ..reassembly.pdus import Options
    from ..reports.findings import findings_table
    from .core import expand_inputs

    err = sys.stderr
    if args.report and _markdown() is None:
        print("dcpdissect: error: --report needs dcpdissect.reports.markdown, "
              "which this installation does not have", file=err)
        return EXIT_BAD_INPUT
    try:
        import pyspark  # noqa: F401

        from .spark import run_pipeline, spark_session
    except ImportError as exc:
        print(f"dcpdissect: error: the pipeline needs pyspark and pyarrow ({exc}); "
              "install them with: pip install 'dcpdissect[spark]'", file=err)
        return EXIT_BAD_INPUT
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"dcpdissect: error: --conf wants KEY=VALUE, got {item!r}", file=err)
            return EXIT_BAD_INPUT
        conf[key.strip()] = value.strip()
    paths = expand_inputs(args.inputs)
    if not paths:
        print(f"dcpdissect: error: no capture files in {' '.join(args.inputs)}", file=err)
        return EXIT_BAD_INPUT
    # A missing input fails here, before Spark starts (URIs are left
    # to Spark).
    missing = [p for p in paths if "://" not in p and not os.path.exists(p)]
    if missing:
        print(f"dcpdissect: error: no such file: {', '.join(missing)}", file=err)
        return EXIT_BAD_INPUT
    options = Options(ports=tuple(args.port), any_port=args.any_port,
                      tls_keylog=args.tls_keylog or "", vxlan_ports=tuple(args.vxlan_port))
    from ..reports.progress import spark_stage_progress
    spark = spark_session(args.master, conf={**spark_stage_progress(), **conf})
    try:
        result = run_pipeline(spark, paths, args.out, options, args.chunk_size)
    except Exception as exc:                     # noqa: BLE001 - Spark's own errors vary
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"dcpdissect: error: the Spark job failed ({reason[:300]}); a Java heap error "
              "wants more memory: --conf spark.driver.memory=... (local) or "
              "spark.executor.memory=... (cluster)", file=err)
        return EXIT_BAD_INPUT
    finally:
        try:
            spark.stop()
        except Exception:                        # noqa: BLE001 - the JVM may be gone
            pass
    out = sys.stdout
    many = len(result.paths) > 1
    for path in result.paths:
        if many:
            out.write(f"== {path}\n")
        out.write(findings_table(result.findings[path]))
        if many:
            out.write("\n")
    out.flush()
    status = EXIT_OK
    for path in result.paths:
        s = result.summaries[path]
        print(s.line() + f", {len(result.findings[path])} findings", file=err)
        for line in s.notes():
            print(line, file=err)
        if s.error:
            print(f"dcpdissect: error: {s.error}", file=err)
            status = EXIT_BAD_INPUT
    if args.report:
        markdown_report = _markdown()
        parts = [markdown_report(p, result.findings[p], result.summaries[p]) for p in result.paths]
        with open(args.report, "w", encoding="utf-8") as fh:
            fh.write("\n\n".join(parts))
        print(f"report written to {args.report}", file=err)
    if status == EXIT_OK and args.fail_on != "never":
        threshold = SEVERITY_RANK[args.fail_on]
        if any(SEVERITY_RANK[f.severity] >= threshold
               for fs in result.findings.values() for f in fs):
            status = EXIT_FINDINGS
    return status
