"""Decode one MCBP frame into a plain :class:`Message` record."""

from __future__ import annotations

from ..protocol import (
    HEADER_SIZE, MAGICS, OPCODES, REQUEST_MAGICS, RESPONSE_MAGICS, SERVER_MAGICS, Layout, Shape,
    opcode_name,
)
from .frameinfo import FrameInfoError, parse_frame_infos, stream_id_of
from .header import unpack as unpack_header
from .layouts import compiled
from .problems import (
    EXTRAS_SIZE, FRAME_INFO, HEADER_OVERRUN, TRUNCATED, UNKNOWN_MAGIC, VALUE_SIZE, Problem,
)

_EMPTY_SHAPE = Shape()


class Message:
    """One decoded MCBP message (header, framing extras, extras/value fields, key)."""

    __slots__ = (
        "magic", "opcode", "framing_len", "keylen", "extlen", "datatype", "vbucket", "status",
        "bodylen", "opaque", "cas", "frame_infos", "stream_id", "extras", "key", "value",
        "fields", "layout", "problems", "spec", "is_request", "value_len",
    )

    @property
    def name(self) -> str:
        return opcode_name(self.magic, self.opcode)

    @property
    def key_range(self) -> tuple[int, int]:
        """Where :attr:`key` lies in the decoded frame (byte offsets from its magic)."""
        start = min(HEADER_SIZE + self.framing_len + self.extlen, HEADER_SIZE + self.bodylen)
        return start, start + len(self.key)

    @property
    def value_range(self) -> tuple[int, int]:
        """Where :attr:`value` lies in the decoded frame (empty when the header overruns)."""
        start = HEADER_SIZE + self.framing_len + self.extlen + self.keylen
        return start, start + len(self.value)

    @property
    def value_cut(self) -> bool:
        """The capture cut the value (this message was decoded from a captured prefix)."""
        return len(self.value) < self.value_len

    @property
    def key_cut(self) -> bool:
        return len(self.key) < self.keylen

    @property
    def shape(self) -> Shape:
        spec = self.spec
        if spec is None:
            return _EMPTY_SHAPE
        return spec.request if self.is_request else spec.response

    def __repr__(self) -> str:
        where = f"vb={self.vbucket}" if self.is_request else f"status={self.status:#x}"
        return f"<Message {self.name} magic={self.magic:#04x} {where} opaque={self.opaque:#x} {self.fields}>"


class _Plan:
    """What decoding needs for one (opcode, request?) pair, compiled once."""

    __slots__ = ("spec", "extras", "sizes", "values")

    def __init__(self, spec, request: bool):
        self.spec = spec
        shape = _EMPTY_SHAPE if spec is None else (spec.request if request else spec.response)
        self.extras = {}        # extras length -> (unpack_from, field names, layout label)
        for lay in shape.extras:
            st, names = compiled(lay)
            self.extras[lay.size] = (st.unpack_from, names, lay.label)
        self.sizes = shape.extras_sizes
        self.values = shape.values


_PLANS: dict[int, _Plan] = {}          # magic << 8 | opcode -> its plan


def _plan(magic: int, opcode: int, request: bool) -> _Plan:
    server = magic in SERVER_MAGICS
    plan = _PLANS[magic << 8 | opcode] = _Plan(None if server else OPCODES.get(opcode), request)
    return plan


def decode(buf) -> Message:
    """Decode exactly one frame (24-byte header + body). Never raises on bad content:
    problems found while decoding are listed in ``Message.problems`` (:class:`Problem`).
    """
    if len(buf) < HEADER_SIZE:
        raise ValueError(f"need {HEADER_SIZE} header bytes, got {len(buf)}")
    data = buf if type(buf) is bytes else bytes(buf)    # its slices: the bytes of extras and key
    raw = data              # (compiled: the pointer to its bytes)
    m = Message()
    (magic, opcode, framing_len, keylen, extlen, datatype, specific, bodylen, opaque,
     cas) = unpack_header(data)
    request = magic in REQUEST_MAGICS
    plan = _PLANS.get(magic << 8 | opcode)
    if plan is None:
        plan = _plan(magic, opcode, request)
    m.magic = magic
    m.opcode = opcode
    m.framing_len = framing_len
    m.keylen = keylen
    m.extlen = extlen
    m.datatype = datatype
    m.bodylen = bodylen
    m.opaque = opaque
    m.cas = cas
    m.is_request = request
    m.spec = plan.spec
    if request:
        m.vbucket, m.status = specific, None
    else:
        m.vbucket, m.status = None, specific
    m.problems = problems = []
    m.fields = fields = {}
    m.layout = None
    m.stream_id = None
    m.value_len = bodylen - framing_len - extlen - keylen
    if not request and magic not in RESPONSE_MAGICS:
        problems.append(Problem(UNKNOWN_MAGIC, f"unknown magic {magic:#04x}"))

    end = HEADER_SIZE + bodylen
    e_start = HEADER_SIZE + framing_len
    k_start = e_start + extlen
    v_start = k_start + keylen
    if v_start <= end <= len(data):         # the common case: whole, and the lengths agree
        m.extras = raw[e_start:k_start]
        m.key = raw[k_start:v_start]
        m.value = memoryview(data)[v_start:end]
        if framing_len:
            _frame_infos(m, raw[HEADER_SIZE:e_start], request)
        else:
            m.frame_infos = []
    elif not _cut_sections(m, data, request, e_start, k_start, v_start, end):
        return m
    if extlen:              # (of a whole message, or of the captured prefix of one)
        hit = plan.extras.get(extlen)
        if hit is not None:
            unpack_from, names, label = hit
            values = unpack_from(m.extras)
            for i in range(len(names)):
                fields[names[i]] = values[i]
            m.layout = label
        elif plan.spec is not None:
            problems.append(Problem(EXTRAS_SIZE, f"extras length {extlen} not in {plan.sizes}"))
    if plan.values:
        _decode_value(m, plan.values)
    return m


def _cut_sections(m: Message, buf: bytes, request: bool, e_start: int, k_start: int,
                  v_start: int, end: int) -> bool:
    """The sections of a frame that is not whole (a captured prefix) or whose lengths do
    not add up: what is there, and its problems. True when its extras were captured whole
    (then they and the value are decoded as for a whole frame)."""
    problems = m.problems
    framing_len, bodylen = m.framing_len, m.bodylen
    m.frame_infos = []
    if len(buf) < end:
        problems.append(Problem(TRUNCATED, f"frame truncated: body has {len(buf) - HEADER_SIZE}"
                                           f" of {bodylen} bytes"))
    if v_start > end:
        problems.append(Problem(HEADER_OVERRUN, f"framing extras {framing_len} + extras "
                                                f"{m.extlen} + key {m.keylen} exceed body "
                                                f"length {bodylen}"))
    if framing_len and min(e_start, end) <= len(buf):
        _frame_infos(m, buf[HEADER_SIZE:min(e_start, end)], request)
    m.extras = buf[min(e_start, end):min(k_start, end)]
    m.key = buf[min(k_start, end):min(v_start, end)]
    m.value = memoryview(buf)[v_start:end] if v_start <= end else memoryview(b"")
    return v_start <= end and len(m.extras) == m.extlen


def _frame_infos(m: Message, raw, request: bool) -> None:
    """The framing extras ``raw`` of ``m``: its frame infos and stream id."""
    try:
        m.frame_infos = parse_frame_infos(raw, request)
    except FrameInfoError as exc:
        m.frame_infos = []
        m.problems.append(Problem(FRAME_INFO, f"bad framing extras: {exc}"))
    m.stream_id = stream_id_of(m.frame_infos)


def _decode_value(m: Message, layouts: tuple[Layout, ...]) -> None:
    """The value's layout, chosen by its length (from the header: a value the capture cut
    is judged by the length it had on the wire, and decoded only when whole)."""
    n = m.value_len
    whole = len(m.value) == n
    facts = m.fields
    status = m.status
    candidates = []                     # the layouts whose conditions hold
    for lay in layouts:
        for k, v in lay.when:
            if (status if k == "status" else facts.get(k)) != v:
                break
        else:
            candidates.append(lay)
    for lay in candidates:
        if lay.repeated:
            if n % lay.size == 0 and (n or lay.when):
                if whole:
                    st, names = compiled(lay)
                    facts[lay.repeated] = [dict(zip(names, st.unpack_from(m.value, off)))
                                           for off in range(0, n, lay.size)]
                    m.layout = lay.label
                return
        elif n == lay.size:
            if whole:
                st, names = compiled(lay)
                facts.update(zip(names, st.unpack_from(m.value)))
                m.layout = lay.label
            return
    if candidates:
        sizes = "/".join(f"{lay.size}{'*n' if lay.repeated else ''}" for lay in candidates)
        m.problems.append(Problem(VALUE_SIZE, f"value length {n} does not match {sizes}"))


def magic_name(magic: int) -> str:
    return MAGICS.text(magic)
