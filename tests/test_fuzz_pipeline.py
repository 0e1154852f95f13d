"""The Spark pipeline given corrupt, truncated and hostile inputs among good ones: it
finishes, lists every unreadable file in ``errors`` and agrees with ``analyze``."""

from __future__ import annotations

import gzip
import random
import shutil
from pathlib import Path

import pytest

from dcpdissect.analysis.run import analyze_file
from dcpdissect.fuzz.gen import mutate_file, seed_files

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")

ROOT = Path(__file__).resolve().parent.parent


def _spark_available() -> bool:
    if shutil.which("java") is None:
        return False
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return True


def corrupt_corpus(directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(42)
    paths = []
    files = seed_files()
    for n in range(14):                                   # byte-level mutations of samples
        p = directory / f"mutated-{n:02d}.pcap"
        p.write_bytes(mutate_file(rng, files[n * 3 % len(files)]))
        paths.append(p)
    clean = (ROOT / "samples" / "clean-replication.pcap").read_bytes()
    extra = {
        "empty.pcap": b"",
        "text.pcap": b"not a capture at all\n" * 10,
        "cut-header.pcap": clean[:20],
        "cut-record.pcap": clean[:len(clean) - 100],
        "cut.pcap.gz": gzip.compress(clean, mtime=0)[:700],
        "absurd-caplen.pcap": clean[:24] + b"\x00" * 8 + b"\xf0\xff\xff\x7f" * 2 + clean[40:],
    }
    for name, data in extra.items():
        p = directory / name
        p.write_bytes(data)
        paths.append(p)
    for name in ("hostile-ooo-storm.pcap", "hostile-absurd-bodylen.pcap", "hostile-seq-jump.pcap",
                 "hostile-garbage-tcp.pcap", "hostile-findings-flood.pcap"):
        paths.append(ROOT / "samples" / name)
    return [str(p) for p in paths]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(not _spark_available(), reason="needs java, pyspark and pyarrow")
def test_pipeline_on_corrupt_inputs(spark, tmp_path):
    import pyarrow.parquet as pq

    from dcpdissect.pipeline.spark import run_pipeline
    paths = corrupt_corpus(tmp_path / "in")
    res = run_pipeline(spark, paths, str(tmp_path / "out"), progress=None, chunk_size=2000)
    assert res.paths == paths
    errors = pq.read_table(tmp_path / "out" / "errors").to_pylist()
    by_file = {e["capture_file"]: e for e in errors}
    expected_bad = set()
    for p in paths:
        ref, summary = analyze_file(p)
        if summary.error is not None:
            expected_bad.add(p)
            assert by_file[p]["message"] == summary.error, p
        assert [(f.rule, f.frame, f.connection) for f in res.findings[p]] == \
            [(f.rule, f.frame, f.connection) for f in ref], p
    assert set(by_file) == expected_bad
    assert len(expected_bad) >= 6
