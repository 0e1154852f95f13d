"""dissect's JSON lines: message_line writes every record of every sample exactly as the
generic jsonl_line does (the reference), redacted or not, with a convention or not."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from dcpdissect.analysis.collections import CollectionsView
from dcpdissect.codec import decode
from dcpdissect.fuzz.gen import mutate_pdu, seed_pdus
from dcpdissect.reassembly.pdus import CaptureError, Pdu, iter_events
from dcpdissect.reports.messages import (MESSAGE_NESTED, MESSAGE_U64, is_u64_name, jsonl_line,
                                         labelled_json, message_json, message_line,
                                         message_record)
from dcpdissect.reports.redact import redact_record


def records(path):
    view = CollectionsView()
    try:
        for ev in iter_events(path):
            if type(ev) is not Pdu:
                view.feed(ev)
                continue
            msg = decode(ev.data)
            yield message_record(ev, msg, view.feed(ev, msg), view.stream_filter(ev.conn, msg))
    except CaptureError:
        return


def test_message_line_equals_jsonl_line_on_every_sample(samples_dir):
    paths = sorted(p for p in samples_dir.iterdir() if p.suffix in (".pcap", ".pcapng", ".gz"))
    seen_keys, n, nested = set(), 0, 0
    for path in paths:
        for record in records(str(path)):
            seen_keys |= set(record)
            nested += any(record.get(k) for k in MESSAGE_NESTED)
            for variant in (record, redact_record(record), {**record, "convention": "checkpoint"}):
                assert message_line(variant) == jsonl_line(variant), (path.name, record["frame"])
            n += 1
    assert n > 1000 and nested > 500
    assert {"collection_id", "collection_filter", "frame_infos"} <= seen_keys
    # the premise of message_line: no other top-level key is a 64-bit name
    assert {k for k in seen_keys if is_u64_name(k)} == set(MESSAGE_U64)


def test_message_line_writes_64_bit_values_as_strings():
    record = {"frame": 1, "ts_ns": 1 << 62, "cas": (1 << 64) - 1, "frame_infos": [],
              "fields": {"by_seqno": 7, "flags": 3}, "names": {}, "problems": []}
    assert message_line(record) == ('{"frame":1,"ts_ns":"4611686018427387904",'
                                    '"cas":"18446744073709551615","frame_infos":[],'
                                    '"fields":{"by_seqno":"7","flags":3},"names":{},'
                                    '"problems":[]}\n')


def test_message_json_equals_message_line_on_every_sample(samples_dir):
    paths = sorted(p for p in samples_dir.iterdir() if p.suffix in (".pcap", ".pcapng", ".gz"))
    n, kinds = 0, set()
    for path in paths:
        view = CollectionsView()
        try:
            for ev in iter_events(str(path)):
                if type(ev) is not Pdu:
                    view.feed(ev)
                    continue
                msg = decode(ev.data)
                doc_key, sfilter = view.feed(ev, msg), view.stream_filter(ev.conn, msg)
                record = message_record(ev, msg, doc_key, sfilter)
                text = message_json(ev, msg, doc_key, sfilter)
                assert text + "}\n" == jsonl_line(record), (path.name, record["frame"])
                for label in ("checkpoint", None):
                    assert (labelled_json(text, label) + "}\n"
                            == jsonl_line({**record, "convention": label}))
                kinds.update(k for k in ("collection_filter", "frame_infos", "problems")
                             if record.get(k))
                kinds.update(("failover_log",) if "failover_log" in record["fields"] else ())
                kinds.add("request" if record["request"] else "response")
                n += 1
        except CaptureError:
            pass
    assert n > 1000
    assert kinds == {"collection_filter", "frame_infos", "problems", "failover_log",
                     "request", "response"}


def test_message_json_of_a_crafted_message():
    from dcpdissect.codec import encode
    from dcpdissect.protocol import opcode_code

    class PduLike:
        frame, frames, ts_ns, conn, direction = 5, (3, 4, 5), 1 << 62, 2, 1
    msg = decode(encode(opcode_code("DcpMutation"), {"by_seqno": 12, "rev_seqno": 1},
                        vbucket=9, opaque=0x70, cas=(1 << 64) - 1, key=b'k"\xc3\xa9%d',
                        stream_id=7))
    line = message_json(PduLike(), msg) + "}\n"
    assert line == jsonl_line(message_record(PduLike(), msg))
    assert ('"frames":[3,4,5]' in line and '"cas":"18446744073709551615"' in line
            and '"key":"k\\"\\u00e9%d"' in line and '"by_seqno":"12"' in line
            and '"stream_id":7' in line and '"vbucket":9,"status":null' in line)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.integers(0, 10**9))
def test_message_json_equals_message_line_on_mutated_frames(seed):
    rng = random.Random(seed)
    pdu = mutate_pdu(rng, rng.choice(seed_pdus()))
    if len(pdu) < 24:
        return

    class PduLike:
        frame, frames, ts_ns, conn, direction = 9, (8, 9), rng.randrange(1 << 63), 1, 1
    msg = decode(pdu)
    assert message_json(PduLike(), msg) + "}\n" == jsonl_line(message_record(PduLike(), msg))
