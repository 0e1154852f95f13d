"""The pipeline on a real Spark standalone cluster: a master and two workers started from
the pyspark distribution on 127.0.0.1, the package shipped to the executors as a zip (the
workers' PYTHONPATH holds nothing of ours), findings equal to ``analyze``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ["resume-collapsed.pcap", "add-stream.pcap", "rollback-violations.pcap",
           "clean-replication.pcap", "violations-marker.pcap"]
CHUNK = "6000"           # the larger samples go through the chunked stages, the rest whole


def _spark_home() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    home = Path(pyspark.__file__).parent
    return home if (home / "bin" / "spark-class").exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive_workers(ui: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
            state = json.load(r)
    except OSError:
        return 0
    return sum(1 for w in state.get("workers", ()) if w.get("state") == "ALIVE")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``spark://127.0.0.1:PORT`` of a master with two 1-core workers; stopped afterwards,
    whatever happens."""
    home = _spark_home()
    if home is None or subprocess.run(["java", "-version"], capture_output=True).returncode:
        pytest.skip("needs java and pyspark")
    work = tmp_path_factory.mktemp("cluster")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m",
               SPARK_LOG_DIR=str(work), SPARK_WORKER_DIR=str(work / "work"), PYTHONPATH="")
    port, ui = _free_port(), _free_port()
    spark_class = str(home / "bin" / "spark-class")
    procs = []

    def start(name, *args):
        log = open(work / f"{name}.log", "wb")
        procs.append(subprocess.Popen([spark_class, *args], env=env, cwd=work, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
        log.close()

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", str(ui))
        for i in range(2):
            start(f"worker{i}", "org.apache.spark.deploy.worker.Worker",
                  f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--cores", "1",
                  "--memory", "768m", "--webui-port", str(_free_port()),
                  "--work-dir", str(work / f"work{i}"))
        deadline = time.monotonic() + 120
        while _alive_workers(ui) < 2:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = {f.name: f.read_text(errors="replace")[-2000:] for f in work.glob("*.log")}
                pytest.fail(f"the standalone cluster did not come up: {logs}")
            time.sleep(0.5)
        yield f"spark://127.0.0.1:{port}", work
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _driver_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    return env


CONF = ["--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.executor.memory=512m", "--conf", "spark.sql.shuffle.partitions=4",
        "--conf", "spark.ui.enabled=false"]


PROBE = """
import json, os, sys
from dcpdissect.pipeline.spark import spark_session
spark = spark_session(sys.argv[1], conf={"spark.driver.host": "127.0.0.1",
                                         "spark.driver.bindAddress": "127.0.0.1",
                                         "spark.executor.memory": "512m",
                                         "spark.ui.enabled": "false"})
def where(_):
    import dcpdissect, socket
    return dcpdissect.__file__, os.environ.get("PYTHONPATH", ""), os.getcwd()
got = spark.sparkContext.parallelize(range(8), 8).map(where).collect()
print(json.dumps(got))
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.slow
def test_executors_import_the_shipped_package(cluster, tmp_path):
    master, work = cluster
    proc = subprocess.run([sys.executable, "-c", PROBE, master], capture_output=True, text=True,
                          env=_driver_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(seen) == 8
    for module_file, pythonpath, cwd in seen:
        # the copy shipped with addPyFile, unpacked in the executor's work directory
        assert "dcpdissect.zip" in module_file, module_file
        assert not module_file.startswith(str(ROOT)), module_file
        # only Spark's own entries (pyspark.zip, py4j, jars): nothing of ours
        entries = [e for e in pythonpath.split(os.pathsep) if e]
        assert all("pyspark" in e or "py4j" in e or "dcpdissect.zip" in e for e in entries), \
            entries
        assert cwd.startswith(str(work)), cwd


@pytest.mark.spark
@pytest.mark.slow
def test_pipeline_on_a_standalone_cluster_equals_analyze(cluster, tmp_path):
    import pyarrow.parquet as pq
    master, _work = cluster
    paths = [str(ROOT / "samples" / s) for s in SAMPLES]
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "dcpdissect.cli", "pipeline", *paths, "--out",
                           str(out), "--master", master, "--chunk-size", CHUNK,
                           "--fail-on", "never", *CONF],
                          capture_output=True, text=True, env=_driver_env(), cwd=tmp_path,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sizes = [os.path.getsize(p) for p in paths]
    assert min(sizes) <= int(CHUNK) < max(sizes)       # both the whole-file and chunked paths
    table = pq.read_table(out / "findings").to_pylist()
    for path in paths:
        ref = subprocess.run([sys.executable, "-m", "dcpdissect.cli", "analyze", path,
                              "--format", "jsonl", "--fail-on", "never"],
                             capture_output=True, text=True, check=True).stdout
        want = sorted((r["rule"], r["frame"], r["connection"], r["vbucket"], r["message"])
                      for r in map(json.loads, ref.splitlines()) if "rule" in r)
        got = sorted((r["rule"], r["frame"], r["connection"], r["vbucket"], r["message"])
                     for r in table if r["capture_file"] == path)
        assert got == want, path
    assert sum(1 for r in table) > 0
    messages = pq.read_table(out / "messages", columns=["capture_file"]).num_rows
    assert messages > 0
