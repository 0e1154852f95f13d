"""Put a made-up opcode into the protocol tables before any module reads them.

``add_opcode(make)`` must run in a fresh interpreter before ``dcpdissect`` is imported.
When ``dcpdissect/protocol/opcodes.py`` has run, ``make(model)`` (``model`` is
``dcpdissect.protocol.model``) is appended to its ``DCP_OPCODES``; ``protocol/__init__.py``
then derives every table from that tuple, so every module of the package sees the opcode
as if it had been written into ``opcodes.py``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

OPCODES_MODULE = "dcpdissect.protocol.opcodes"


class _AfterOpcodes(importlib.abc.MetaPathFinder):
    def __init__(self, make):
        self.make = make

    def find_spec(self, name, path, target=None):
        if name != OPCODES_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            op = self.make(sys.modules["dcpdissect.protocol.model"])
            module.DCP_OPCODES += (op,)
            # the tables' self-check finds every DCP name in the list of all opcode names
            names = getattr(sys.modules.get("dcpdissect.protocol.client_opcodes"),
                            "CLIENT_OPCODE_NAMES", None)
            if names is not None:
                names.setdefault(op.code, op.name)

        spec.loader.exec_module = exec_module
        return spec


def add_opcode(make) -> None:
    assert "dcpdissect" not in sys.modules, "the tables are built already"
    sys.meta_path.insert(0, _AfterOpcodes(make))
