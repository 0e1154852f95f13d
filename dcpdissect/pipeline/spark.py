"""Spark driver of the pipeline stages in :mod:`.core`.

Files that are compressed or fit in one chunk are analysed whole, one task per file and no
shuffle: :func:`filepass.analyze_whole` gives findings, summary, connection and stream rows
and the messages rows. When ``--out`` is a local directory and the master local, the task
writes the messages to Parquet itself (pyarrow) and returns the rest (a plain RDD job);
otherwise Spark writes them and the rest comes back through an accumulator.
Larger files go through the chunked stages, where only a frame index travels:

::

    index    headers only → chunk descriptors (on the driver, or one task per file when
             there are many files)
    stage A  one task per chunk → per flow: frame numbers, times, offsets (collected);
             a file with IP fragments (no flow holds them) is then analysed whole
    driver   flows packed into about 2 × defaultParallelism analysis groups by bytes
    stage B  one task per group: its frames read by offset, analysed as ``analyze`` does;
             messages rows written, findings, connections, streams and counts returned
    again    coupled groups merged, groups with unforeseen connection numbers, run once
             more (:mod:`.merge`); results merged in ``analyze``'s order

The ``streams`` rows come from the per-stream accounting of the analysis, as
``dcpdissect streams`` prints them.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import warnings
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import NamedTuple

from ..capture.fileset import FileSet
from ..capture.readers import CaptureError, open_capture
from ..reassembly.pdus import Options, Summary
from ..reports.messages import is_u64_name, iso_time
from ..reports.redact import Pseudonyms, redact_finding
from . import core, filepass, tables
from .chunks import DEFAULT_CHUNK_SIZE, index_file
from .frames import index_chunk
from .groups import TcpClock, run_group
from .merge import FileMerge

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


def local_memory() -> str:
    """Heap of a local-mode Spark (driver and executors in one JVM): a quarter of the
    machine's memory, from 1 to 4 GiB."""
    try:
        gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30
    except (ValueError, OSError, AttributeError):
        gib = 4
    return f"{max(1, min(4, gib // 4))}g"


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
            # the JVM's default 1 GiB heap runs out sorting the segments of a 1 GB capture
            "spark.driver.memory": local_memory(),
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
        DoubleType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    S, L, I, B, Y = StringType(), LongType(), IntegerType(), BooleanType(), BinaryType()
    D = DoubleType()
    arrow = {S: pa.string(), L: pa.int64(), I: pa.int32(), B: pa.bool_(), Y: pa.binary(),
             D: pa.float64()}

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
    finding_cols = [("capture_file", S), ("rule", S), ("severity", S), ("title", S),
                    ("message", S), ("frame", L), ("frames", LA), ("time", S), ("ts_ns", L),
                    ("connection", I), ("vbucket", I), ("opaque", L), ("fields", S),
                    ("context", LA), ("pdu", Y), ("file", S), ("file_frame", L)]
    conn_cols = [("client_ip", S), ("client_port", I), ("server_ip", S), ("server_port", I),
                 ("mid_stream", B), ("opened_frame", L), ("opened_ts_ns", L),
                 ("closed_frame", L), ("closed_ts_ns", L), ("close_reason", S),
                 ("messages_c2s", L), ("messages_s2c", L), ("gaps", L), ("gap_bytes", L),
                 ("resyncs", L), ("lost_pdus", L), ("tunnel", S)]
    by_name = {"string": S, "long": L, "int": I, "bool": B, "u64": DecimalType(20, 0),
               "list<long>": LA, "list<string>": SA}
    message = make([(c, by_name[t]) for c, t in tables.MESSAGE_SCHEMA])
    stream_types = {c: S for c in ("capture_file", "client", "server", "role", "bucket",
                                   "dcp_name", "answer", "items", "ended", "end_reason",
                                   "first_time", "last_time")}
    stream_types.update({"connection": I, "vbucket": I, "stream_id": I,
                         "duration": D})
    stream_types.update({c: DecimalType(20, 0) for c in tables.STREAM_COLUMNS if is_u64_name(c)})
    types = {"string": S, "long": L}
    return {"message": message, "finding": make(finding_cols),
            "connection": make([("capture_file", S), ("connection", I)] + conn_cols),
            "stream": make([(c, stream_types.get(c, L)) for c in tables.STREAM_COLUMNS]),
            "error": make([(c, types[t]) for c, t in _ERROR_COLUMNS]),
            "file": make([(c, types[t]) for c, t in _FILE_COLUMNS])}


# -- the job ----------------------------------------------------------------------------------

class PipelineResult(NamedTuple):
    paths: list               # capture files, in input order
    findings: dict            # path -> [Finding], sorted like analyze
    summaries: dict           # path -> Summary
    messages: dict            # path -> message count
    errors: list              # rows of the errors table (dicts)
    out: str
    timings: dict
    whole: frozenset = frozenset()   # files analysed whole, one task each
    reruns: dict = {}                # path -> analysis groups run again (chunked files)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)



def _probe(path, chunk_size: int):
    """(read whole?, open error): a file is read whole in one task when it is compressed
    or fits in one chunk, a file set always (its files' faults come as it is read)."""
    if isinstance(path, FileSet):
        return True, None
    try:
        reader = open_capture(path)
    except CaptureError as exc:
        return False, exc
    with reader:
        compressed, size = reader.compressed, reader.size
    return compressed or size is None or size <= chunk_size, None


def _bytes(path) -> int:
    """The size of a file, or of every file of a set."""
    return sum(map(os.path.getsize, path.paths if isinstance(path, FileSet) else (path,)))


def _local_dir(spark, out: str) -> str | None:
    """The directory behind ``out`` when it is on this machine and the master is local
    (tasks can then write their Parquet files there themselves), else None."""
    if not spark.sparkContext.master.startswith("local"):
        return None
    if out.startswith("file:"):
        return "/" + out[5:].lstrip("/")
    if "://" in out:
        return None
    default_fs = spark.sparkContext._jsc.hadoopConfiguration().get("fs.defaultFS") or "file:///"
    return os.path.abspath(out) if default_fs.startswith("file:") else None


def _collector():
    from pyspark.accumulators import AccumulatorParam

    class Collect(AccumulatorParam):
        def zero(self, value):
            return []

        def addInPlace(self, a, b):
            a.extend(b)
            return a

    return Collect()


def _iso_times(ts: list):
    """``iso_time`` of every (non-negative) timestamp, as an Arrow string array: each
    distinct second is formatted once."""
    import pyarrow as pa
    import pyarrow.compute as pc
    stamps = pa.array(ts, pa.int64())
    secs = pc.divide(stamps, 1_000_000_000)
    frac = pc.subtract(stamps, pc.multiply(secs, 1_000_000_000))
    uniq = pc.unique(secs)
    heads = pa.array([iso_time(s * 1_000_000_000)[:-11] for s in uniq.to_pylist()], pa.string())
    return pc.binary_join_element_wise(heads.take(pc.index_in(secs, uniq)), ".",
                                       pc.utf8_lpad(frac.cast(pa.string()), 9, "0"), "Z", "")


def _header_columns(raw: bytes) -> dict:
    """The :data:`tables.HEADER_COLUMNS` of messages whose 24-byte headers are ``raw``, end
    to end, as Arrow arrays: the values ``decode`` sets from the header, names looked up
    once per distinct value."""
    import numpy as np
    import pyarrow as pa

    from ..codec.header import numpy_dtype
    from ..protocol import (
        CLASSIC_HEADER, FLEXIBLE_HEADER, FLEXIBLE_MAGICS, MAGICS, REQUEST_MAGICS, STATUS, opcode_name,
    )
    h = np.frombuffer(raw, numpy_dtype(CLASSIC_HEADER))
    f = np.frombuffer(raw, numpy_dtype(FLEXIBLE_HEADER))       # the same bytes, flexible framing
    magic, opcode = h["magic"], h["opcode"]
    flex = np.isin(magic, sorted(FLEXIBLE_MAGICS))
    framing = np.where(flex, f["framing_len"], 0).astype(np.int64)
    keylen = np.where(flex, f["keylen"], h["keylen"]).astype(np.int64)
    extlen, bodylen = h["extlen"].astype(np.int64), h["bodylen"].astype(np.int64)
    request = np.isin(magic, sorted(REQUEST_MAGICS))
    specific = h["specific"].astype(np.int32)

    def names(keys, make, mask=None):
        uniq, inverse = np.unique(keys, return_inverse=True)
        table = pa.array([make(int(k)) for k in uniq], pa.string())
        return table.take(pa.array(inverse.ravel().astype(np.int64), mask=mask))

    pair = magic.astype(np.int64) << 8 | opcode
    return {
        "magic": pa.array(magic.astype(np.int32)),
        "magic_name": names(magic, MAGICS.text),
        "opcode": pa.array(opcode.astype(np.int32)),
        "opcode_name": names(pair, lambda k: opcode_name(k >> 8, k & 0xFF)),
        "request": pa.array(request),
        "vbucket": pa.array(specific, mask=~request),
        "status": pa.array(specific, mask=request),
        "status_name": names(specific, STATUS.text, mask=request),
        "opaque": pa.array(h["opaque"].astype(np.int64)),
        "cas": pa.array(h["cas"].astype(np.uint64)),
        "datatype": pa.array(h["datatype"].astype(np.int32)),
        "framing_len": pa.array(framing.astype(np.int32)),
        "extlen": pa.array(extlen.astype(np.int32)),
        "keylen": pa.array(keylen.astype(np.int32)),
        "bodylen": pa.array(bodylen),
        "value_len": pa.array(bodylen - framing - extlen - keylen),
    }



def _message_batch(cols: dict, schema):
    """One Arrow record batch of ``messages`` rows from :class:`tables.MessageColumns`
    (``time`` when missing made here from ``ts_ns``, the header columns from ``header``)."""
    import pyarrow as pa
    if "header" in cols:
        cols = dict(cols, **_header_columns(cols["header"]))
    arrays = []
    for f in schema:
        values = cols[f.name]
        if f.name == "time" and values is None:
            ts = cols["ts_ns"]
            if ts and min(ts) >= 0:
                arrays.append(_iso_times(ts))
                continue
            values = [iso_time(t) for t in ts]
        if isinstance(values, pa.Array):
            arrays.append(values if values.type == f.type else values.cast(f.type))
        elif pa.types.is_decimal(f.type):         # cas: unsigned 64-bit
            arrays.append(pa.array(values, pa.uint64()).cast(f.type))
        else:
            arrays.append(pa.array(values, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _PartWriter:
    """Writes record batches to one Parquet file, in row groups of about ``rows`` rows;
    the file is only created for a first row."""

    def __init__(self, where: str, schema, rows: int = 1 << 17):
        self.where, self.schema, self.rows = where, schema, rows
        self.pending: list = []
        self.count = 0
        self.writer = None

    def add(self, batch) -> None:
        self.pending.append(batch)
        self.count += batch.num_rows
        if self.count >= self.rows:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        if self.pending:
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.where, self.schema)
            self.writer.write_table(pa.Table.from_batches(self.pending, self.schema))
        self.pending, self.count = [], 0

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            self.writer.close()


def _drain(writer: _PartWriter, batches):
    """Write every batch of a generator to ``writer``, close it, return the generator's value."""
    while True:
        try:
            writer.add(next(batches))
        except StopIteration as done:
            writer.close()
            return done.value


def _write_table(spark, out: str, local: str | None, name: str, table, rows: list) -> None:
    """Replace table ``name`` under ``out`` with ``rows`` (tuples in the order of the
    table's columns): written here with pyarrow when ``out`` is local, else by Spark."""
    spark_schema, arrow_schema = table
    if local is None:
        spark.createDataFrame(rows, spark_schema).coalesce(1).write.mode("overwrite").parquet(
            f"{out}/{name}")
        return
    import pyarrow as pa
    import pyarrow.parquet as pq
    where = os.path.join(local, name)
    shutil.rmtree(where, ignore_errors=True)
    os.makedirs(where)
    cols = list(zip(*rows)) if rows else [[] for _ in arrow_schema]
    pq.write_table(pa.Table.from_arrays([pa.array(list(c), f.type) for c, f in zip(cols, arrow_schema)],
                                        schema=arrow_schema), os.path.join(where, "part-00000.parquet"))


def run_pipeline(spark, inputs: Iterable[str], out: str, options: Options | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE,
                 progress: Callable[[str], None] | None = _stderr,
                 index_on_executors: bool | None = None, redact: bool = False,
                 one_capture: bool = False) -> PipelineResult:
    """Run the pipeline on ``inputs`` (files, directories, globs) and write the Parquet
    tables under ``out``; return what the CLI prints. The files of a ring buffer, or all
    of them with ``one_capture``, are one capture (:func:`~.core.capture_units`), keyed by
    its name (``str`` of its :class:`~dcpdissect.capture.fileset.FileSet`) and analysed
    whole in one task, so that its connections stay together. Files that are compressed or
    fit in one chunk are analysed whole, one task each; larger ones go through the chunked
    stages.
    Their index pass runs as a Spark job when ``index_on_executors`` (default: from
    ``INDEX_ON_EXECUTORS`` files on). With ``redact`` the findings are made from the
    captures as they are; the tables and the result carry document keys as their
    pseudonyms (:class:`~dcpdissect.reports.redact.Pseudonyms`) from one random secret made
    here, sent with the tasks and never written, and the findings redacted
    (:func:`~dcpdissect.reports.redact.redact_finding`)."""
    say = progress or (lambda _t: None)
    options = options or Options()
    secret = os.urandom(32) if redact else None
    sch = _schemas()
    timings: dict = {}
    t0 = time.monotonic()
    out = out.rstrip("/") or "/"

    units = core.capture_units(core.expand_inputs(inputs), one_capture)
    if not units:
        say("pipeline: no capture files")
        return PipelineResult([], {}, {}, {}, [], out, timings)
    sources = {str(u): u for u in units}
    paths = list(sources)
    local = _local_dir(spark, out)
    state = _State(paths)
    whole, split = [], []
    for p in paths:
        is_whole, error = _probe(sources[p], chunk_size)
        if error is not None:
            state.errors.append(_error_row(error, "index", None, None))
            state.totals[p].errors.append(error)
        else:
            (whole if is_whole else split).append(p)
    timings["probe"] = time.monotonic() - t0
    if local is not None:
        shutil.rmtree(os.path.join(local, "messages"), ignore_errors=True)
        os.makedirs(os.path.join(local, "messages"))
    if whole:
        t1 = time.monotonic()
        say(f"pipeline: {len(whole)} file(s) analysed whole, one task each")
        _run_whole(spark, [sources[p] for p in whole], out, local, options, sch, state,
                   timings, secret)
        timings["whole files"] = time.monotonic() - t1
    if split:
        _run_chunked(spark, split, out, local, options, chunk_size, sch, state, say, timings,
                     index_on_executors, append=bool(whole), secret=secret)
    if (not whole and not split) or (local is not None
                                     and not os.listdir(os.path.join(local, "messages"))):
        _write_table(spark, out, local, "messages", sch["message"], [])

    t2 = time.monotonic()
    summaries = {p: state.summaries[p] if p in state.summaries else state.totals[p].summary()
                 for p in paths}
    findings = {p: state.findings.get(p, []) for p in paths}
    if secret is not None:
        pseudonyms = Pseudonyms(secret)
        findings = {p: [redact_finding(f, pseudonyms) for f in fs] for p, fs in findings.items()}
        state.finding_rows = {p: [tables.finding_row(p, f, summaries[p].locate(f.frame))
                                  for f in fs] for p, fs in findings.items()}
    counts = {p: state.counts.get(p, 0) for p in paths}
    state.streams.sort(key=lambda r: r[0])     # each file's rows are in order already
    files = [_file_row(summaries[p], len(findings[p]), counts[p]) for p in paths]
    for name, key, rows in (("findings", "finding", [r for p in paths for r in state.finding_rows[p]]),
                            ("connections", "connection", [r for p in paths for r in state.conn_rows[p]]),
                            ("streams", "stream", state.streams),
                            ("errors", "error", [tuple(e[c] for c, _ in _ERROR_COLUMNS)
                                                 for e in state.errors]),
                            ("files", "file", [tuple(f[c] for c, _ in _FILE_COLUMNS) for f in files])):
        _write_table(spark, out, local, name, sch[key], rows)
    timings["tables"] = time.monotonic() - t2
    timings["total"] = time.monotonic() - t0
    say("pipeline: timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()
                                          if k != "total"))
    say(f"pipeline: done in {timings['total']:.1f} s; tables under {out}")
    return PipelineResult(paths, findings, summaries, counts, state.errors, out, timings,
                          frozenset(whole) | state.whole, dict(state.reruns))


class _State:
    """What the driver gathers for the small tables and the CLI."""

    def __init__(self, paths: list[str]):
        self.totals = {p: tables.FileTotals(p) for p in paths}    # files not read at all
        self.summaries: dict = {}
        self.reruns: dict = {}
        self.errors: list = []
        self.findings: dict = defaultdict(list)
        self.counts: dict = defaultdict(int)
        self.finding_rows: dict = defaultdict(list)
        self.conn_rows: dict = defaultdict(list)
        self.streams: list = []
        self.whole: set = set()         # files analysed whole, one task each


def _run_whole(spark, files: list[str], out: str, local: str | None, options: Options,
               sch: dict, state: _State, timings: dict, secret: bytes | None,
               tag: str = "whole", append: bool = False) -> None:
    """One task per file, the largest first: :func:`filepass.analyze_whole`. When ``out`` is
    local, a plain RDD job: each task writes its messages Parquet file (named with ``tag``)
    and returns the rest. Otherwise mapInArrow hands the messages to Spark's writer (added
    to the table's rows with ``append``) and the rest comes back through an accumulator.
    Each task's CPU and wall time are summed in ``timings``. ``secret``: the key of the
    document keys' pseudonyms (None: keys as they are)."""
    sc = spark.sparkContext
    files = sorted(files, key=lambda p: -_bytes(p))
    message_schema = sch["message"][1]
    where = os.path.join(local, "messages") if local is not None else None

    def one(i):
        """Yields the message batches of file ``i``; returns (WholeFile pickled, CPU, wall)."""
        import gc
        gc.set_threshold(50_000, *gc.get_threshold()[1:])    # fewer collections in the pass
        cpu, wall = time.process_time(), time.monotonic()
        result: list = []
        pseudonyms = Pseudonyms(secret) if secret is not None else None
        for cols in filepass.analyze_whole(files[i], options, result, time=False, header=False,
                                           pseudonyms=pseudonyms):
            yield _message_batch(cols, message_schema)
        return tables.dumps(result[0]), time.process_time() - cpu, time.monotonic() - wall

    if where is not None:
        def write_one(i):
            return _drain(_PartWriter(os.path.join(where, f"part-{i:05d}-{tag}.parquet"),
                                      message_schema), one(i))

        got = sc.parallelize(range(len(files)), len(files)).map(write_one).collect()
    else:
        collected = sc.accumulator([], _collector())

        def per_file(batches):
            for batch in batches:
                for i in batch.column(0).to_pylist():
                    collected.add([(yield from one(i))])

        (spark.range(len(files), numPartitions=len(files))
         .mapInArrow(per_file, sch["message"][0]).write.mode("append" if append else "overwrite")
         .parquet(f"{out}/messages"))
        got = collected.value
    timings["task CPU"] = timings.get("task CPU", 0.0) + sum(c for _b, c, _w in got)
    timings["task wall"] = timings.get("task wall", 0.0) + sum(w for _b, _c, w in got)
    for blob, _cpu, _wall in got:
        w = tables.loads(blob)
        state.summaries[w.path] = w.summary
        state.findings[w.path] = w.findings
        state.counts[w.path] = w.messages
        state.finding_rows[w.path] = [tables.finding_row(w.path, f, w.summary.locate(f.frame))
                                      for f in w.findings]
        state.conn_rows[w.path] = [(w.path,) + tuple(c) for c in w.connections]
        state.streams += w.streams
        if w.error is not None:
            state.errors.append(_error_row(w.error, "read", 0, 1))


def _run_chunked(spark, paths: list[str], out: str, local: str | None, options: Options,
                 chunk_size: int, sch: dict, state: _State, say, timings: dict,
                 index_on_executors: bool | None, append: bool,
                 secret: bytes | None) -> None:
    """The chunked stages for files larger than a chunk: index, frame index per chunk
    (stage A), analysis groups (stage B) and their runs again (:mod:`.merge`). A file whose
    chunks hold IP fragments leaves after stage A and is analysed whole."""
    sc = spark.sparkContext
    t0 = time.monotonic()
    if index_on_executors is None:
        index_on_executors = len(paths) >= INDEX_ON_EXECUTORS
    if index_on_executors:
        say(f"pipeline: indexing {len(paths)} capture files on the executors")
        indexes = (sc.parallelize(paths, min(len(paths), 4 * sc.defaultParallelism))
                   .map(lambda p: index_file(p, chunk_size)).collect())
    else:
        say(f"pipeline: indexing {len(paths)} capture file(s)")
        indexes = core.index_inputs(paths, chunk_size)
    pieces = [c for i in indexes for c in i.chunks]
    merges = {i.path: FileMerge(i, options, 2 * sc.defaultParallelism) for i in indexes}
    for idx in indexes:
        if idx.error is not None:
            state.errors.append(_error_row(idx.error, "index", None, None))
    timings["index"] = time.monotonic() - t0
    say(f"pipeline: {len(pieces)} chunk(s) of up to {chunk_size} bytes "
        f"({timings['index']:.1f} s)")

    t1 = time.monotonic()
    say("pipeline: stage A (frame index per chunk and flow)")

    def stage_a(piece):
        cpu = time.process_time()
        got = index_chunk(piece, options)
        return tables.dumps((got, time.process_time() - cpu))

    timings["frame index CPU"] = 0.0
    if pieces:
        for blob in sc.parallelize(pieces, len(pieces)).map(stage_a).collect():
            (stats, flows), cpu = tables.loads(blob)
            timings["frame index CPU"] += cpu
            merges[stats.path].add_chunk(stats, flows)
            if stats.error is not None:
                state.errors.append(_error_row(stats.error, "read", stats.offset,
                                               stats.first_frame))
    timings["frame index"] = time.monotonic() - t1

    fragmented = [p for p, m in merges.items() if m.fragmented]
    if fragmented:              # IP fragments belong to no flow: those files are read whole
        say(f"pipeline: {len(fragmented)} file(s) with IP fragments analysed whole")
        state.errors = [e for e in state.errors if e["capture_file"] not in fragmented
                        or e["stage"] != "read"]
        for p in fragmented:
            del merges[p]
        _run_whole(spark, fragmented, out, local, options, sch, state, timings, secret,
                   tag="whole-fragmented", append=append)
        append = True
        state.whole.update(fragmented)

    b_clocks = sc.broadcast({i.path: (i.blocks if i.splittable else i.chunks) for i in indexes})
    number = {p: i for i, p in enumerate(paths)}
    stage = _StageB(spark, out, local, options, sch, b_clocks, number, secret)
    tasks = [t for m in merges.values() for t in m.plan()]
    rounds = 0
    while tasks:
        rounds += 1
        t2 = time.monotonic()
        say(f"pipeline: stage B (analysis, {len(tasks)} group(s))" if rounds == 1 else
            f"pipeline: stage B again for {len(tasks)} merged or renumbered group(s)")
        for r in stage.run(tasks):
            merges[r.path].add_result(r)
        tasks = []
        for m in merges.values():
            before = set(m.results)
            tasks += m.again()
            stage.drop(m.index.path, before - set(m.results))
        key = "analysis" if rounds == 1 else "analysis again"
        timings[key] = timings.get(key, 0.0) + time.monotonic() - t2
    timings.update(stage.timings)

    t3 = time.monotonic()
    stage.finish(append, [(p, g) for p, m in merges.items() for g in m.results])
    for path, m in merges.items():
        got = m.merged()
        state.summaries[path] = got.summary
        state.reruns[path] = m.reruns
        state.findings[path] = got.findings
        state.counts[path] = got.messages
        state.finding_rows[path] = [tables.finding_row(path, f) for f in got.findings]
        state.conn_rows[path] = [(path,) + tuple(c) for c in got.connections]
        state.streams += got.streams
    timings["merge"] = time.monotonic() - t3
    b_clocks.unpersist()


def _group_part(where: str, file_number: int, group: int) -> str:
    return os.path.join(where, f"part-{file_number:05d}-group-{group:05d}.parquet")


class _StageB:
    """Runs analysis groups (:func:`.groups.run_group`), one task each. When ``out`` is a
    local directory, each task writes its ``messages`` Parquet file and :meth:`drop`
    deletes those of groups run again; otherwise the rows go to a staging table with
    their group, and :meth:`finish` copies those of the final groups."""

    def __init__(self, spark, out, local, options, sch, clocks, number, secret):
        self.spark, self.out, self.local, self.options = spark, out, local, options
        self.secret = secret
        self.schema = sch["message"]
        self.clocks, self.number = clocks, number
        self.where = os.path.join(local, "messages") if local is not None else None
        self.staged: list[str] = []
        self.timings = {"task CPU": 0.0, "task wall": 0.0}

    def _part(self, path: str, group: int) -> str:
        return _group_part(self.where, self.number[path], group)

    def run(self, tasks: list) -> list:
        options, clocks, schema, secret = self.options, self.clocks, self.schema[1], self.secret
        tasks = sorted(tasks, key=lambda t: -sum(f.nbytes for f in t.flows))

        def one(task):
            """Yields the message batches of ``task``; returns (GroupResult, CPU, wall)."""
            import gc
            gc.set_threshold(50_000, *gc.get_threshold()[1:])
            cpu, wall = time.process_time(), time.monotonic()
            got: list = []
            task_options = task.options or options
            pseudonyms = Pseudonyms(secret) if secret is not None else None
            for cols in run_group(task.path, task.group, task.flows, task_options, task.numbers,
                                  TcpClock(clocks.value[task.path],
                                           vxlan_ports=task_options.vxlan_ports), got,
                                  time=False, header=False, pseudonyms=pseudonyms):
                yield _message_batch(cols, schema)
            return got[0], time.process_time() - cpu, time.monotonic() - wall

        sc = self.spark.sparkContext
        if self.where is not None:
            where, number = self.where, self.number

            def write_one(task):
                return tables.dumps(_drain(_PartWriter(
                    _group_part(where, number[task.path], task.group), schema), one(task)))

            got = [tables.loads(b) for b in
                   sc.parallelize(tasks, len(tasks)).map(write_one).collect()]
        else:
            import pyarrow as pa
            collected = sc.accumulator([], _collector())
            b_tasks = sc.broadcast(tasks)
            staged = f"{self.out}/_staging/messages-{len(self.staged)}"
            from pyspark.sql.types import StringType, StructField, StructType
            spark_schema = StructType(self.schema[0].fields
                                      + [StructField("group_key", StringType(), True)])

            def per_task(batches):
                for batch in batches:
                    for i in batch.column(0).to_pylist():
                        task = b_tasks.value[i]
                        key = f"{task.path}\n{task.group}"
                        gen = one(task)
                        while True:
                            try:
                                b = next(gen)
                            except StopIteration as done:
                                collected.add([tables.dumps(done.value)])
                                break
                            yield pa.RecordBatch.from_arrays(
                                b.columns + [pa.array([key] * b.num_rows, pa.string())],
                                names=b.schema.names + ["group_key"])

            (self.spark.range(len(tasks), numPartitions=len(tasks))
             .mapInArrow(per_task, spark_schema).write.mode("overwrite").parquet(staged))
            self.staged.append(staged)
            got = [tables.loads(b) for b in collected.value]
            b_tasks.unpersist()
        for result, cpu, wall in got:
            self.timings["task CPU"] += cpu
            self.timings["task wall"] += wall
        return [r for r, _c, _w in got]

    def drop(self, path: str, groups) -> None:
        """Forget the messages of ``path``'s groups that were run again."""
        if self.where is not None:
            for g in groups:
                try:
                    os.remove(self._part(path, g))
                except FileNotFoundError:
                    pass

    def finish(self, append: bool, final: list) -> None:
        """Staged rows of the ``final`` (path, group) runs → the ``messages`` table."""
        if not self.staged:
            return
        from pyspark.sql import functions as F
        keys = [f"{p}\n{g}" for p, g in final]
        (self.spark.read.parquet(*self.staged).filter(F.col("group_key").isin(keys))
         .drop("group_key").write.mode("append" if append else "overwrite")
         .parquet(f"{self.out}/messages"))
        jvm = self.spark.sparkContext._jvm
        staging = jvm.org.apache.hadoop.fs.Path(f"{self.out}/_staging")
        staging.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration()).delete(
            staging, True)


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
            "tcp": tables._json(s.tcp)}
