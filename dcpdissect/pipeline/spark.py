"""Spark driver of the pipeline stages in :mod:`.core`.

::

    index    headers only → chunk descriptors (on the driver, or one task per file when
             there are many files)
    stage A  mapInArrow over chunks        → TCP segment rows with a flow key
    stage B  repartition(file, flow) + sortWithinPartitions(file, flow, frame)
             + mapInArrow, one flow at a time → events with a sort key   (persisted)
    stage C  repartition(file) + sortWithinPartitions(file, sort key)
             + mapInArrow, one file at a time → findings and connections
    messages events (Pdu) ⋈ connection ids → decoded rows, in parallel
    streams  aggregated from messages

Stage C is the one serial step per capture file: cross-connection rules (resume fidelity,
rollback, add-stream correlation) need every connection of the file in capture order.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import NamedTuple

from ..reassembly.pdus import Options, Summary
from . import core
from .chunks import DEFAULT_CHUNK_SIZE, index_file

__all__ = ["TABLES", "PipelineResult", "run_pipeline", "ship_package", "spark_session"]

TABLES = ("messages", "findings", "connections", "streams", "errors", "files")
INDEX_ON_EXECUTORS = 16      # from this many files on, the index pass is a Spark job

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def _is_local(master: str | None) -> bool:
    return master is None or master.startswith("local")


def spark_session(master: str | None = None, app_name: str = "dcpdissect pipeline",
                  conf: dict | None = None):
    """A SparkSession set up for the pipeline: quiet logs, no console progress bars, UI
    off and loopback binding for local masters, workers on this interpreter unless
    ``PYSPARK_PYTHON`` says otherwise, and the package shipped to a non-local ``master``.
    Under ``spark-submit`` (no ``master`` given) the submitted settings are kept."""
    from pyspark.sql import SparkSession

    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas",
                            category=FutureWarning)
    submitted = master is None and "PYSPARK_GATEWAY_PORT" in os.environ
    local = not submitted and _is_local(master)
    settings = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "4096",
    }
    if not submitted:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        log4j = os.path.join(tempfile.gettempdir(), "dcpdissect-log4j2.properties")
        try:
            with open(log4j, "w", encoding="utf-8") as fh:
                fh.write(_LOG4J)
            settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{log4j}"
        except OSError:
            pass
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings.update({
            "spark.ui.enabled": "false",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
            "spark.sql.shuffle.partitions": str(max(2, 2 * (os.cpu_count() or 1))),
        })
    settings.update(conf or {})
    builder = SparkSession.builder.appName(app_name)
    if not submitted:
        builder = builder.master(master or "local[*]")
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not local and not submitted:
        ship_package(spark)
    return spark


def ship_package(spark) -> str:
    """Zip the dcpdissect package into a temporary directory and add it to the
    executors' Python path. Its dependencies must already be there (see docs/pipeline.md)."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.path.dirname(pkg)
    dest = os.path.join(tempfile.mkdtemp(prefix="dcpdissect-"), "dcpdissect.zip")
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for base, dirs, files in os.walk(pkg):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".lua", ".json", ".md")):
                    full = os.path.join(base, name)
                    z.write(full, os.path.relpath(full, root))
    spark.sparkContext.addPyFile(dest)
    return dest


# -- Arrow schemas --------------------------------------------------------------------------

def _schemas():
    import pyarrow as pa
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        BooleanType,
        DecimalType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    S, L, I, B, Y = StringType(), LongType(), IntegerType(), BooleanType(), BinaryType()
    arrow = {S: pa.string(), L: pa.int64(), I: pa.int32(), B: pa.bool_(), Y: pa.binary()}

    def make(cols):
        spark_fields, arrow_fields = [], []
        for name, t in cols:
            spark_fields.append(StructField(name, t, True))
            if isinstance(t, ArrayType):
                at = pa.list_(arrow[t.elementType])
            elif isinstance(t, DecimalType):
                at = pa.decimal128(t.precision, t.scale)
            else:
                at = arrow[t]
            arrow_fields.append(pa.field(name, at))
        return StructType(spark_fields), pa.schema(arrow_fields)

    LA, SA = ArrayType(L), ArrayType(S)
    chunk = make([("capture_file", S), ("piece", Y)])
    seg = make([("capture_file", S), ("flow", S), ("frame", L), ("ts_ns", L), ("src", S),
                ("dst", S), ("sport", I), ("dport", I), ("seq", L), ("ack", L), ("flags", I),
                ("payload", Y), ("truncated", B), ("meta", Y)])
    event = make([("capture_file", S), ("flow", S), ("kind", S), ("k_frame", L), ("k_phase", I),
                  ("k_sub", L), ("k_sub2", L), ("k_seq", L), ("conn", I), ("etype", S),
                  ("frame", L), ("blob", Y)])
    finding_cols = [("capture_file", S), ("rule", S), ("severity", S), ("title", S),
                    ("message", S), ("frame", L), ("frames", LA), ("time", S), ("ts_ns", L),
                    ("connection", I), ("vbucket", I), ("opaque", L), ("fields", S),
                    ("context", LA), ("pdu", Y)]
    conn_cols = [("client_ip", S), ("client_port", I), ("server_ip", S), ("server_port", I),
                 ("mid_stream", B), ("opened_frame", L), ("opened_ts_ns", L),
                 ("closed_frame", L), ("closed_ts_ns", L), ("close_reason", S),
                 ("messages_c2s", L), ("messages_s2c", L), ("gaps", L), ("gap_bytes", L),
                 ("resyncs", L), ("lost_pdus", L)]
    analysis = make([("kind", S)] + finding_cols + conn_cols + [("flow", S), ("local_conn", I)])
    msg_types = {"frame": L, "frames": LA, "time": S, "ts_ns": L, "connection": I, "direction": S,
                 "magic": I, "magic_name": S, "opcode": I, "opcode_name": S, "request": B,
                 "vbucket": I, "status": I, "status_name": S, "opaque": L,
                 "cas": DecimalType(20, 0), "datatype": I, "framing_len": I, "extlen": I,
                 "keylen": I, "bodylen": L, "value_len": L, "stream_id": I, "frame_infos": S,
                 "key": S, "layout": S, "fields": S, "names": S, "problems": SA,
                 "capture_file": S}
    message = make([(c, msg_types[c]) for c in core.MESSAGE_COLUMNS])
    return {"chunk": chunk, "seg": seg, "event": event, "analysis": analysis,
            "message": message, "finding_cols": [c for c, _ in finding_cols],
            "conn_cols": [c for c, _ in conn_cols]}


class _Batcher:
    """Collects row tuples and turns them into Arrow record batches of at most ``size``
    rows or about ``max_bytes`` of binary payload (large PDUs stay far from Arrow's 2 GiB
    binary-column limit)."""

    def __init__(self, schema, size: int = 4096, max_bytes: int = 64 << 20):
        self.schema = schema
        self.size = size
        self.max_bytes = max_bytes
        self.rows: list = []
        self.nbytes = 0

    def add(self, row: tuple, nbytes: int = 0) -> list:
        """[] or [a full batch]: use with ``yield from``."""
        self.rows.append(row)
        self.nbytes += nbytes
        if len(self.rows) >= self.size or self.nbytes >= self.max_bytes:
            return self.flush()
        return []

    def flush(self) -> list:
        import pyarrow as pa
        rows, self.rows = self.rows, []
        self.nbytes = 0
        if not rows:
            return []
        cols = list(zip(*rows))
        return [pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(cols, self.schema)], schema=self.schema)]


def _rows(batches, names):
    for batch in batches:
        cols = [batch.column(n).to_pylist() for n in names]
        yield from zip(*cols)


# -- the job ----------------------------------------------------------------------------------

class PipelineResult(NamedTuple):
    paths: list               # capture files, in input order
    findings: dict            # path -> [Finding], sorted like analyze
    summaries: dict           # path -> Summary
    messages: dict            # path -> message count
    errors: list              # rows of the errors table (dicts)
    out: str
    timings: dict


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_pipeline(spark, inputs: Iterable[str], out: str, options: Options | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE,
                 progress: Callable[[str], None] | None = _stderr,
                 index_on_executors: bool | None = None) -> PipelineResult:
    """Run the pipeline on ``inputs`` (files, directories, globs) and write the Parquet
    tables under ``out``; return what the CLI prints. The index pass runs as a Spark job
    when ``index_on_executors`` (default: from ``INDEX_ON_EXECUTORS`` files on)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    say = progress or (lambda _t: None)
    options = options or Options()
    sch = _schemas()
    timings: dict = {}
    t0 = time.monotonic()
    out = out.rstrip("/") or "/"

    paths = core.expand_inputs(inputs)
    if not paths:
        say("pipeline: no capture files")
        return PipelineResult([], {}, {}, {}, [], out, timings)
    sc = spark.sparkContext
    if index_on_executors is None:
        index_on_executors = len(paths) >= INDEX_ON_EXECUTORS
    if index_on_executors:
        say(f"pipeline: indexing {len(paths)} capture files on the executors")
        indexes = (sc.parallelize(paths, min(len(paths), 4 * sc.defaultParallelism))
                   .map(lambda p: index_file(p, chunk_size)).collect())
    else:
        say(f"pipeline: indexing {len(paths)} capture file(s)")
        indexes = core.index_inputs(paths, chunk_size)
    pieces = [(i.path, core.dumps(c)) for i in indexes for c in i.chunks]
    clocks = {i.path: (i.blocks if i.splittable else i.chunks) for i in indexes}
    timings["index"] = time.monotonic() - t0
    say(f"pipeline: {len(pieces)} chunk(s) of up to {chunk_size} bytes "
        f"({timings['index']:.1f} s)")

    b_clocks = sc.broadcast(clocks)
    seg_schema = sch["seg"][1]
    event_schema = sch["event"][1]

    def stage_a(batches):
        out_b = _Batcher(seg_schema)
        for path, blob in _rows(batches, ("capture_file", "piece")):
            piece = core.loads(blob)
            stats: list = []
            for r in core.scan_chunk(piece, options, stats):
                yield from out_b.add((path, r.flow, r.frame, r.ts_ns, r.src, r.dst, r.sport,
                                      r.dport, r.seq, r.ack, r.flags, r.payload, r.truncated,
                                      None), len(r.payload))
            meta = core.dumps(stats[0])           # the chunk's counts, after its segments
            yield from out_b.add((path, "") + (None,) * 11 + (meta,))
        yield from out_b.flush()

    def stage_b(batches):
        from itertools import groupby

        from ..capture.packets import Segment
        out_b = _Batcher(event_schema)
        made: dict = {}
        cols = ("capture_file", "flow", "frame", "ts_ns", "src", "dst", "sport", "dport",
                "seq", "ack", "flags", "payload", "truncated", "meta")
        for (path, flow), group in groupby(_rows(batches, cols), key=lambda r: (r[0], r[1])):
            if flow == "":
                for r in group:
                    yield from out_b.add((path, "", "meta", 0, 0, 0, 0, 0, None, None, None, r[13]))
                continue
            clock = made.get(path)
            if clock is None:
                clock = made[path] = core.TcpClock(b_clocks.value.get(path, []))
            segs = ((r[2], r[3], Segment(r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12]))
                    for r in group)
            res: list = []
            for kf, kp, ks, ks2, kq, ev in core.flow_events(segs, options, clock, res):
                blob = core.dumps(ev)
                yield from out_b.add((path, flow, "ev", kf, kp, ks, ks2, kq, ev.conn,
                                      type(ev).__name__, ev.frame, blob), len(blob))
            yield from out_b.add((path, flow, "flow", 0, 0, 0, 0, 0, None, None, None,
                                  core.dumps(res[0])))
        yield from out_b.flush()

    analysis_schema = sch["analysis"][1]
    n_find, n_conn = len(sch["finding_cols"]), len(sch["conn_cols"])

    def stage_c(batches):
        from itertools import groupby
        out_b = _Batcher(analysis_schema, 1024)
        for path, group in groupby(_rows(batches, ("capture_file", "flow", "blob")),
                                   key=lambda r: r[0]):
            fa = core.FileAnalysis(path)
            for _p, flow, blob in group:
                fa.feed(flow, core.loads(blob))
            fa.finish()
            for f in fa.findings:
                yield from out_b.add(("finding",) + core.finding_row(path, f)
                                     + (None,) * (n_conn + 2), len(f.pdu or b""))
            local = {gid: key for key, gid in fa.ids.items()}
            for c in fa.connection_rows():
                row = [None] * n_find
                row[0], row[9] = path, c.connection
                yield from out_b.add(("connection",) + tuple(row) + tuple(c)[1:]
                                     + local[c.connection])
        yield from out_b.flush()

    message_schema = sch["message"][1]

    def messages(batches):
        out_b = _Batcher(message_schema, 2048)
        ids = b_ids.value
        for path, flow, conn, blob in _rows(batches, ("capture_file", "flow", "conn", "blob")):
            pdu = core.loads(blob)._replace(conn=ids[path, flow, conn])
            yield from out_b.add(core.message_row(path, pdu))
        yield from out_b.flush()

    n_files = max(1, len(paths))
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions"))
    results: dict = {p: core.FileTotals(p) for p in paths}
    errors: list = []
    for idx in indexes:
        if idx.error is not None:
            errors.append(_error_row(idx.error, "index", None, None))
            results[idx.path].errors.append(idx.error)

    t1 = time.monotonic()
    say("pipeline: stages A+B (segments per chunk, events per flow)")
    chunks_df = spark.createDataFrame(pieces, sch["chunk"][0]) if pieces else \
        spark.createDataFrame([], sch["chunk"][0])
    if pieces:
        chunks_df = chunks_df.repartition(min(len(pieces), max(shuffle, sc.defaultParallelism)))
    segs_df = chunks_df.mapInArrow(stage_a, sch["seg"][0])
    events = (segs_df.repartition(shuffle, "capture_file", "flow")
              .sortWithinPartitions("capture_file", "flow", "frame")
              .mapInArrow(stage_b, sch["event"][0])
              .persist(StorageLevel.MEMORY_AND_DISK))
    for path, kind, blob in events.filter(F.col("kind") != "ev").select(
            "capture_file", "kind", "blob").collect():
        item = core.loads(blob)
        if kind == "meta":
            results[path].add_chunk(item)
            if item.error is not None:
                errors.append(_error_row(item.error, "read", item.offset, item.first_frame))
        else:
            results[path].add_flow(item)
    timings["segments+events"] = time.monotonic() - t1

    t2 = time.monotonic()
    say(f"pipeline: stage C (analysis, one task per capture file: {n_files})")
    analysis = (events.filter(F.col("kind") == "ev")
                .select("capture_file", "flow", "blob", "k_frame", "k_phase", "k_sub", "k_sub2",
                        "k_seq")
                .repartition(min(n_files, max(shuffle, 1)), "capture_file")
                .sortWithinPartitions("capture_file", "k_frame", "k_phase", "k_sub", "k_sub2",
                                      "k_seq")
                .select("capture_file", "flow", "blob")
                .mapInArrow(stage_c, sch["analysis"][0])
                .persist(StorageLevel.MEMORY_AND_DISK))
    findings: dict = defaultdict(list)
    ids: dict = {}
    counts: dict = defaultdict(int)
    for row in analysis.collect():
        if row["kind"] == "finding":
            findings[row["capture_file"]].append(core.finding_from_row(row.asDict()))
        else:
            ids[row["capture_file"], row["flow"], row["local_conn"]] = row["connection"]
            counts[row["capture_file"]] += row["messages_c2s"] + row["messages_s2c"]
    (analysis.filter(F.col("kind") == "finding").select(*sch["finding_cols"])
     .write.mode("overwrite").parquet(f"{out}/findings"))
    (analysis.filter(F.col("kind") == "connection")
     .select("capture_file", "connection", *sch["conn_cols"])
     .write.mode("overwrite").parquet(f"{out}/connections"))
    timings["analysis"] = time.monotonic() - t2

    t3 = time.monotonic()
    say("pipeline: messages and streams")
    b_ids = sc.broadcast(ids)
    (events.filter(F.col("etype") == "Pdu").select("capture_file", "flow", "conn", "blob")
     .mapInArrow(messages, sch["message"][0]).write.mode("overwrite").parquet(f"{out}/messages"))
    _streams(spark.read.parquet(f"{out}/messages"), F).write.mode("overwrite").parquet(
        f"{out}/streams")
    timings["messages"] = time.monotonic() - t3

    summaries = {}
    for p in paths:
        s = results[p].summary()
        summaries[p] = s
    _write_small(spark, f"{out}/errors", errors, _ERROR_COLUMNS)
    _write_small(spark, f"{out}/files", [_file_row(summaries[p], len(findings.get(p, ())),
                                                   counts.get(p, 0)) for p in paths], _FILE_COLUMNS)
    events.unpersist()
    analysis.unpersist()
    b_ids.unpersist()
    b_clocks.unpersist()
    timings["total"] = time.monotonic() - t0
    say(f"pipeline: done in {timings['total']:.1f} s; tables under {out}")
    return PipelineResult(paths, {p: findings.get(p, []) for p in paths}, summaries,
                          {p: counts.get(p, 0) for p in paths}, errors, out, timings)


def _streams(msgs, F):
    """One row per (capture_file, connection, vbucket, stream_id) of the DCP stream messages
    a producer sends (server → client requests: markers, mutations, stream ends, ...)."""
    seqno = F.get_json_object("fields", "$.by_seqno").cast("long")
    name = F.col("opcode_name")
    stream_ops = (F.col("opcode") >= 0x51) & (F.col("opcode") <= 0x67) & \
        ~F.col("opcode").isin(0x5C, 0x5D, 0x5E)
    return (msgs.filter(stream_ops & F.col("request") & (F.col("direction") == "s2c")
                        & F.col("vbucket").isNotNull())
            .groupBy("capture_file", "connection", "vbucket", "stream_id")
            .agg(F.count(F.lit(1)).alias("messages"),
                 F.sum((name == "DcpSnapshotMarker").cast("long")).alias("snapshot_markers"),
                 F.sum((name == "DcpMutation").cast("long")).alias("mutations"),
                 F.sum((name == "DcpDeletion").cast("long")).alias("deletions"),
                 F.sum((name == "DcpExpiration").cast("long")).alias("expirations"),
                 F.sum((name == "DcpStreamEnd").cast("long")).alias("stream_ends"),
                 F.min(seqno).alias("min_seqno"), F.max(seqno).alias("max_seqno"),
                 F.min("frame").alias("first_frame"), F.max("frame").alias("last_frame"),
                 F.min("time").alias("first_time"), F.max("time").alias("last_time"))
            .orderBy("capture_file", "connection", "vbucket", "stream_id"))


_ERROR_COLUMNS = (("capture_file", "string"), ("stage", "string"), ("chunk_offset", "long"),
                  ("chunk_first_frame", "long"), ("frame", "long"), ("reason", "string"),
                  ("message", "string"))
_FILE_COLUMNS = (("capture_file", "string"), ("frames", "long"), ("tcp_segments", "long"),
                 ("connections", "long"), ("messages", "long"), ("pdus", "long"),
                 ("gaps", "long"), ("gap_bytes", "long"), ("resyncs", "long"),
                 ("lost_pdus", "long"), ("tls_connections", "long"), ("findings", "long"),
                 ("error", "string"), ("tcp", "string"))


def _error_row(exc, stage: str, offset, first_frame) -> dict:
    return {"capture_file": exc.path, "stage": stage, "chunk_offset": offset,
            "chunk_first_frame": first_frame, "frame": exc.frame, "reason": exc.reason,
            "message": str(exc)}


def _file_row(s: Summary, findings: int, messages: int) -> dict:
    return {"capture_file": s.path, "frames": s.frames, "tcp_segments": s.tcp_segments,
            "connections": s.connections, "messages": messages, "pdus": s.pdus, "gaps": s.gaps,
            "gap_bytes": s.gap_bytes, "resyncs": s.resyncs, "lost_pdus": s.lost_pdus,
            "tls_connections": s.tls_connections, "findings": findings, "error": s.error,
            "tcp": core._json(s.tcp)}


def _write_small(spark, where: str, rows: list, columns) -> None:
    schema = ", ".join(f"{n} {t}" for n, t in columns)
    data = [tuple(r[n] for n, _ in columns) for r in rows]
    spark.createDataFrame(data, schema).coalesce(1).write.mode("overwrite").parquet(where)
