"""``dcpdissect nodes --format markdown|html`` on the real two-point captures of
samples/multinode: both name the offset, lags and findings that ``--format jsonl`` gives;
the HTML draws a message one point sent and the other never saw as one mark at the frame
tshark finds (README of samples/multinode), links findings and timelines both ways, places
labels that never overlap, escapes what it is given, and lays out in headless Chromium."""

from __future__ import annotations

import json
import re
from html import unescape
import xml.etree.ElementTree as ET
from itertools import combinations
from statistics import median

import pytest

from dcpdissect.cli import main
from test_nodes import SAMPLES, tshark_frames

PAIRS = ("forwarded", "delayed", "dropped", "ack-dropped")
SVG = "{http://www.w3.org/2000/svg}"
CHAR, ASCENT, DESCENT = 0.62 * 11, 10, 3        # the label box the report promises


def run(tmp_path, name: str, fmt: str, *points: str) -> str:
    out = tmp_path / f"{name}.{fmt}"
    points = points or (str(SAMPLES / f"{name}-replica.pcapng"),
                        str(SAMPLES / f"{name}-active.pcapng"))
    assert main(["nodes", *points, "--format", fmt, "-o", str(out)]) in (0, 1)
    return out.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[tuple[str, str], str]:
    tmp = tmp_path_factory.mktemp("nodes")
    return {(name, fmt): run(tmp, name, fmt) for name in PAIRS
            for fmt in ("jsonl", "markdown", "html")}


def svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(s) for s in re.findall(r"<svg .*?</svg>", page, re.S)]


@pytest.mark.parametrize("name", PAIRS)
def test_markdown_and_html_name_the_offset_lags_and_findings_of_jsonl(outputs, name):
    records = [json.loads(line) for line in outputs[name, "jsonl"].splitlines()]
    offset = next(r for r in records if r["type"] == "clock_offset")
    lags: dict[int, list[int]] = {}
    for r in records:
        if r["type"] == "lag" and r["direction"] == "s2c":
            lags.setdefault(r["vbucket"], []).append(r["lag_ns"])
    expected = {(str(vb), str(len(v)), f"{min(v) / 1e6:.3f}", f"{int(median(v)) / 1e6:.3f}",
                 f"{max(v) / 1e6:.3f}") for vb, v in lags.items()}
    findings = [(r["rule"], r["fields"]["point"], r["frame"], r["message"])
                for r in records if r["type"] == "finding"]
    md, page = outputs[name, "markdown"], outputs[name, "html"]
    for text in (md, page):
        said = re.search(r"clock offset \(10\.0\.0\.1 - 10\.0\.0\.2\): ([+-][\d.]+) s", text)
        assert said and abs(float(said.group(1)) - offset["offset_ns"] / 1e9) < 1e-6
    md_lags = {tuple(c.strip() for c in row.split("|")[1:-1])
               for row in re.findall(r"^\| \d+ \|.*$", md, re.M)}
    html_lags = {tuple(re.findall(r'<td class="num">([^<]*)</td>', row))
                 for row in re.findall(r"<tr>(<td class=\"num\">\d+</td>(?:<td class=\"num\">"
                                       r"[\d.]+</td>){4})</tr>", page)}
    assert md_lags == html_lags == expected and len(expected) == (3 if name != "ack-dropped"
                                                                  else 1)
    md_findings = [(rid, point, int(frame), message) for point, frame, message, rid in
                   re.findall(r"^### (\S+) frame (\d+): (.*)\n(?:.*\n)*?.*\"rule\":\"([^\"]+)\"",
                              md, re.M)]
    html_findings = [(rid, unescape(msg)) for rid, msg in re.findall(
        r'<tr id="finding-\d+">.*?<code>([^<]+)</code>.*?<td>([^<]*)</td><td>\S+: <code>',
        page)]
    assert md_findings == findings
    assert html_findings == [(rid, message) for rid, _p, _f, message in findings]
    assert len(findings) == {"forwarded": 0, "delayed": 0, "dropped": 1, "ack-dropped": 1}[name]


@pytest.mark.tshark
def test_the_dropped_message_is_the_one_unmatched_send_mark(outputs):
    frames = tshark_frames(SAMPLES / "dropped-active.pcapng",
                           "couchbase.vbucket==1 && couchbase.opcode==0x57 && "
                           "couchbase.extras.by_seqno==2")
    assert frames == [21]
    assert tshark_frames(SAMPLES / "dropped-replica.pcapng",
                         "couchbase.vbucket==1 && couchbase.opcode==0x57 && "
                         "couchbase.extras.by_seqno==2") == []
    page = outputs["dropped", "html"]
    marks = re.findall(r'<path data-unmatched="(\w)" data-frame="(\d+)"', page)
    assert marks == [("b", "21")]           # B: the active node, the second point given
    figure = re.search(r'<figure id="timeline-(\d+)">((?:(?!</figure>).)*data-unmatched.*?)'
                       r"</figure>", page, re.S)
    assert "vbucket 1 of" in figure.group(2)
    assert 'href="#finding-1"' in figure.group(2)
    assert f'href="#timeline-{figure.group(1)}"' in re.search(
        r'<tr id="finding-1">.*?</tr>', page).group(0)
    for name in ("forwarded", "delayed"):
        assert "data-unmatched" not in outputs[name, "html"]
    assert re.findall(r'data-unmatched="(\w)" data-frame="(\d+)"',
                      outputs["ack-dropped", "html"]) == [("a", "14")]


def test_labels_never_overlap_nor_leave_the_picture(outputs):
    count = 0
    for name in PAIRS:
        for svg in svgs(outputs[name, "html"]):
            _x, _y, width, height = map(float, svg.get("viewBox").split())
            found = []
            for t in svg.iter(f"{SVG}text"):
                x, y, w = float(t.get("x")), float(t.get("y")), len(t.text) * CHAR
                x0 = {"start": x, "middle": x - w / 2, "end": x - w}[t.get("text-anchor")]
                found.append((x0, y - ASCENT, x0 + w, y + DESCENT, t.text))
            count += len(found)
            for a in found:
                assert 0 <= a[0] and a[2] <= width and 0 <= a[1] and a[3] <= height, a
            for a, b in combinations(found, 2):
                assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)
    assert count > 60


def test_every_stream_has_a_timeline_with_its_messages_counted(outputs):
    page = outputs["delayed", "html"]
    captions = re.findall(r"<figcaption>Timeline \d+: vbucket (\d+) of", page)
    assert captions == ["0", "1", "2"]
    drawn = re.findall(r"(\d+) of (\d+) messages drawn; 0 never seen", page)
    assert drawn and all(a == b for a, b in drawn)
    # every drawn message sits in a lane, the send and receive of one joined by a line
    svg = svgs(page)[0]
    assert len(list(svg.iter(f"{SVG}line"))) > 10


def test_names_are_escaped(tmp_path):
    page = run(tmp_path, "esc", "html", f"<b>&r={SAMPLES / 'dropped-replica.pcapng'}",
               f"a\"x={SAMPLES / 'dropped-active.pcapng'}")
    assert "<b>&r" not in page and "&lt;b&gt;&amp;r" in page and 'a"x' not in page
    assert len(svgs(page)) == 3         # still well-formed XML


def test_layout_in_headless_chromium(outputs, tmp_path):
    """The delayed pair at 1400 x 1000: nothing wider than the window, the SVG labels as
    Chromium's font draws them do not overlap, no console error."""
    from test_html_report import LABEL_OVERLAPS, evaluate, open_page, problems

    path = tmp_path / "delayed.html"
    path.write_text(outputs["delayed", "html"], encoding="utf-8")
    b, session = open_page(path.as_uri(), width=1400, height=1000)
    try:
        width = evaluate(b, session, "document.documentElement.scrollWidth")
        assert width <= 1400
        overlaps = evaluate(b, session, LABEL_OVERLAPS)
        assert len(overlaps) == 3 and all(n == 0 for _count, n in overlaps), overlaps
        assert problems(b.events) == []
    finally:
        b.close()


def test_a_timeline_draws_the_window_around_its_finding_and_counts_the_rest(monkeypatch):
    from dcpdissect.analysis.nodes import compare, read_point
    from dcpdissect.reports import nodes_html

    monkeypatch.setattr(nodes_html, "AROUND", 1)
    page = nodes_html.nodes_html(compare(
        read_point("replica", str(SAMPLES / "dropped-replica.pcapng")),
        read_point("active", str(SAMPLES / "dropped-active.pcapng"))))
    figure = re.search(r"Timeline 2: vbucket 1 .*?</figure>", page, re.S).group(0)
    assert "3 of 7 messages drawn (4 not drawn); 1 never seen" in figure
    assert re.findall(r'data-unmatched="(\w)" data-frame="(\d+)"', figure) == [("b", "21")]
    assert len(re.findall(r'<circle data-point="a"', figure)) == 2     # seqnos 1 and 3


@pytest.mark.tshark
def test_a_timeline_holds_its_streams_messages_and_no_other(outputs):
    """The delayed pair's vbucket 0: its first message is the consumer's stream request
    at the frame tshark finds, and the DCP control answer that shares its opaque is not
    drawn."""
    request = tshark_frames(SAMPLES / "delayed-replica.pcapng",
                            "couchbase.magic==0x80 && couchbase.opcode==0x53 && "
                            "couchbase.vbucket==0")
    assert len(request) == 1
    figure = re.search(r'<figure id="timeline-1">.*?</figure>', outputs["delayed", "html"],
                       re.S).group(0)
    first = re.findall(r"<tr><td[^>]*>([^<]*)</td><td[^>]*>[^<]*</td><td>([^<]*)</td>",
                       figure)[0]
    assert first == (str(request[0]), "StreamReq")
    assert "Control" not in figure


def test_without_an_offset_there_is_no_timeline(tmp_path):
    points = (str(SAMPLES / "forwarded-replica.pcapng"), str(SAMPLES / "dropped-active.pcapng"))
    page = run(tmp_path, "apart", "html", *points)
    assert "<svg" not in page and "No timeline" in page and "Losses not judged" in page
    assert "Losses not judged" in run(tmp_path, "apart", "markdown", *points)


def test_markdown_lists_the_files_of_a_ring_buffer_point(tmp_path):
    from test_nodes import ring_files

    files = ring_files(tmp_path, SAMPLES / "dropped-active.pcapng", 12)
    md = run(tmp_path, "ring", "markdown", str(SAMPLES / "dropped-replica.pcapng"),
             *(f"--point=active={f}" for f in files))
    assert md.count(f"- frames 1–12: {files[0]} frames 1–12") == 1
    finding = json.loads(re.search(r"```json\n(.*)\n```", md).group(1))
    assert (finding["frame"], finding["file"], finding["file_frame"]) == (21, str(files[1]), 9)
