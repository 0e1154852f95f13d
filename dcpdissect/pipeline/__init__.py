"""The ``analyze`` run over many or large captures on Spark.

The engine-agnostic stages are :mod:`.core` (inputs and the local driver), :mod:`.chunks`
(record-aligned chunks), :mod:`.frames` (stage A), :mod:`.groups` (stage B),
:mod:`.merge` (the driver's merge), :mod:`.filepass` (one file's pass) and :mod:`.tables`
(the tables' rows); the Spark driver is :mod:`.spark`, the command
:mod:`dcpdissect.cli.pipeline`.
"""
