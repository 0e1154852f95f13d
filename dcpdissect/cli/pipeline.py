"""``dcpdissect pipeline``: the ``analyze`` run over many or large captures on Spark
(:mod:`dcpdissect.pipeline`); pyspark is imported only when the command runs."""

from __future__ import annotations

import argparse
import os
import sys

from .common import (EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, add_capture_options,
                     add_fail_on_option, add_min_severity_option, at_least, capture_options,
                     fails, with_examples)


def _size(text: str) -> int:
    from ..pipeline.chunks import parse_size
    try:
        return parse_size(text)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 256MB, 64KB, 1000000)") from None


def register(sub) -> None:
    p = sub.add_parser(
        "pipeline", help="analyse many or large captures on Spark, writing Parquet tables",
        description="Runs the analyze pipeline on Spark and writes the messages, findings, "
                    "connections, streams, errors and files tables under --out.",
        **with_examples("dcpdissect pipeline samples/resume-collapsed.pcap "
                        "samples/rollback-correct.pcap --out tables --report report.md"))
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="capture files, directories (searched recursively) or globs; the "
                        "files of a ring buffer (tcpdump -C/-W, dumpcap, editcap -c/-i "
                        "names) are read as one capture")
    p.add_argument("--one-capture", action="store_true",
                   help="read all the inputs as one capture (the files of one capture "
                        "point, whatever their names), their frames merged in time order")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output directory (or URI) for the Parquet tables")
    p.add_argument("--master", default=None,
                   help="Spark master (default local[*]); a non-local master gets the package "
                        "shipped")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting, e.g. spark.driver.memory=4g (repeatable)")
    p.add_argument("--chunk-size", type=_size, default="256MB", metavar="SIZE",
                   help="split uncompressed captures into record-aligned chunks of about SIZE")
    p.add_argument("--report", metavar="FILE", help="also write the Markdown report to FILE")
    p.add_argument("--redact", action="store_true",
                   help="document keys as same-length pseudonyms (one keyed hash per run: "
                        "equal keys stay equal) in the tables, findings and report; finding "
                        "PDUs and messages redacted as analyze --redact does")
    add_min_severity_option(p)
    add_fail_on_option(p)
    add_capture_options(p)
    p.set_defaults(func=cmd_pipeline)


def cmd_pipeline(args) -> int:
    from ..pipeline.core import expand_inputs
    try:
        import pyspark  # noqa: F401

        from ..pipeline.spark import run_pipeline, spark_session
    except ImportError as exc:
        return _error(f"the pipeline needs pyspark and pyarrow ({exc}); install them with: "
                      "pip install 'dcpdissect[spark]'")
    conf = _conf(args.conf)
    if conf is None:
        return EXIT_BAD_INPUT
    paths = expand_inputs(args.inputs)
    if not paths:
        return _error(f"no capture files in {' '.join(args.inputs)}")
    # A missing input fails here, before Spark starts (URIs are left to Spark).
    missing = [p for p in paths if "://" not in p and not os.path.exists(p)]
    if missing:
        return _error(f"no such file: {', '.join(missing)}")
    from ..reports.progress import spark_stage_progress
    spark = spark_session(args.master, conf={**spark_stage_progress(), **conf})
    try:
        result = run_pipeline(spark, paths, args.out, capture_options(args), args.chunk_size,
                              redact=args.redact, one_capture=args.one_capture)
    except Exception as exc:                     # noqa: BLE001 - Spark's own errors vary
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return _error(f"the Spark job failed ({reason[:300]}); a Java heap error wants more "
                      "memory: --conf spark.driver.memory=... (local) or "
                      "spark.executor.memory=... (cluster)")
    finally:
        try:
            spark.stop()
        except Exception:                        # noqa: BLE001 - the JVM may be gone
            pass
    return _report(args, result)


def _error(text: str) -> int:
    print(f"dcpdissect: error: {text}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _conf(items: list[str]) -> dict | None:
    """``--conf KEY=VALUE`` settings (None: one is malformed, said on stderr)."""
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            _error(f"--conf wants KEY=VALUE, got {item!r}")
            return None
        conf[key.strip()] = value.strip()
    return conf


def _report(args, result) -> int:
    """The findings tables on stdout, each file's summary on stderr, ``--report``; the exit
    code."""
    from ..reassembly.pdus import counted
    from ..reports.findings import findings_table
    from ..reports.markdown import REDACTED_NOTE, markdown_report
    out, err = sys.stdout, sys.stderr
    many = len(result.paths) > 1
    shown = {p: at_least(result.findings[p], args.min_severity) for p in result.paths}
    for path in result.paths:
        if many:
            out.write(f"== {path}\n")
        out.write(findings_table(shown[path]))
        if many:
            out.write("\n")
    out.flush()
    status = EXIT_OK
    for path in result.paths:
        s = result.summaries[path]
        print(f"{s.line()}, {counted(len(shown[path]), 'finding')}", file=err)
        for line in s.notes():
            print(line, file=err)
        if s.error:
            _error(s.error)
            status = EXIT_BAD_INPUT
    if args.report:
        notes = [REDACTED_NOTE] if args.redact else []
        parts = [markdown_report(p, shown[p], result.summaries[p], notes=notes)
                 for p in result.paths]
        with open(args.report, "w", encoding="utf-8") as fh:
            fh.write("\n\n".join(parts))
        print(f"report written to {args.report}", file=err)
    if status == EXIT_OK and fails([f for fs in shown.values() for f in fs], args.fail_on):
        status = EXIT_FINDINGS
    return status
