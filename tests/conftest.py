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
