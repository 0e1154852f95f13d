"""Liveness and flow-control rules: noops, buffer acknowledgements and the consumer's window, answers to messages never sent, datatypes used per direction.

Judged by :mod:`dcpdissect.analysis.streams`.
"""

from .model import ERROR, INFO, WARNING, rule  # noqa: F401

RULES: tuple = ()
