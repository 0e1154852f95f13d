import os
import sys
from pathlib import Path

import pytest

from dcpdissect.samples.builder import all_specs, build

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture(scope="session")
def built():
    """Every sample freshly built, with what a correct decoder must find in it."""
    return {spec.name: build(spec) for spec in all_specs()}


@pytest.fixture(scope="session")
def samples_dir():
    return SAMPLES


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for every Spark test of the run."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from dcpdissect.pipeline.spark import spark_session
    session = spark_session("local[2]", app_name="dcpdissect tests", conf={
        "spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "2"})
    yield session
    session.stop()
