"""The values of the messages that set up a connection, which the tables give no layout:
HELLO's features (a request's are asked for, a successful response's are the ones the
server enabled; include/mcbp/protocol/feature.h) and a DcpControl request's key and value
(``enable_noop`` = ``true``). The negotiation rules depend on them; reports show them with
the decoded fields."""

from __future__ import annotations

from ..protocol import HELLO_FEATURES, SERVER_MAGICS, STATUS_SUCCESS, opcode_code

HELLO, DCP_CONTROL = opcode_code("Hello"), opcode_code("DcpControl")
SETTING_OPCODES = frozenset({HELLO, DCP_CONTROL})


def _text(raw) -> str:
    return bytes(raw).decode("utf-8", "replace")


def setting_fields(msg) -> dict:
    """``{"features": [ids]}`` of a HELLO request or successful response, ``{"control_key":
    ..., "control_value": ...}`` of a DcpControl request, ``{}`` for any other message.
    Only what was captured: the features of whole 2-byte ids, no control value cut short."""
    if msg.opcode not in SETTING_OPCODES or msg.magic in SERVER_MAGICS:
        return {}
    if msg.opcode == HELLO:
        if not (msg.is_request or msg.status == STATUS_SUCCESS):
            return {}
        v = bytes(msg.value)
        return {"features": [int.from_bytes(v[i:i + 2], "big")
                             for i in range(0, len(v) - 1, 2)]}
    if not msg.is_request or len(msg.key) != msg.keylen or len(msg.value) != msg.value_len:
        return {}
    return {"control_key": _text(msg.key), "control_value": _text(msg.value)}


def setting_names(fields: dict) -> dict[str, str]:
    """The feature names of :func:`setting_fields` (``{"features": "XATTR,JSON"}``)."""
    if "features" not in fields:
        return {}
    return {"features": ",".join(HELLO_FEATURES.text(f) for f in fields["features"])}
