from pathlib import Path

import pytest

from dcpdissect.samples.builder import SPECS, build

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture(scope="session")
def built():
    """Every sample freshly built, with what a correct decoder must find in it."""
    return {spec.name: build(spec) for spec in SPECS}


@pytest.fixture(scope="session")
def samples_dir():
    return SAMPLES
