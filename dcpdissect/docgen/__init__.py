"""The reference documents, rendered from the tables: docs/protocol.md from the protocol
tables and the Scapy classes (:mod:`.protocol_doc`), docs/rules.md from the rule registry
(:mod:`.rules_doc`).

A backend like the Lua plugin: it sits above the tables, the rules and the Scapy layers,
which know nothing of it. ``python -m dcpdissect.regen`` writes both documents.
"""

from . import protocol_doc, rules_doc

DOCUMENTS = {"protocol": protocol_doc.render, "rules": rules_doc.render}
