import os
import shutil
import sys
from pathlib import Path

import pytest

from dcpdissect.samples.builder import all_specs, build

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def pytest_runtest_setup(item):
    """The one tshark gate: a test marked ``tshark`` runs the real tshark (found on PATH),
    and fails without it (scripts/test.sh installs it; a skip would pass unseen)."""
    if item.get_closest_marker("tshark") and shutil.which("tshark") is None:
        pytest.fail("tshark is not installed (scripts/setup.sh installs it)", pytrace=False)


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
