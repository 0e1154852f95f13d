"""The HTML report's structure on real samples: findings before streams, counts by severity
equal to ``analyze --format jsonl``'s findings, every finding detailed (its rule's title and
rationale from the catalogue, a Wireshark filter, a hexdump of bytes tshark finds in its
frame), links both ways between findings and timelines, one colour per connection, SVG text
labels that never overlap, a rollback loop drawn apart, streams keyed by server; and the
page's layout as headless Chromium draws it."""

from __future__ import annotations

import json
from collections import Counter
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html import escape
from itertools import combinations
from pathlib import Path

import pytest

from dcpdissect.analysis.rules import RULES

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
NAMES = ("rollback-violations", "resume-collapsed", "move-node-collapsed",
         "replica-node-violations")
SVG = "{http://www.w3.org/2000/svg}"
CHAR, ASCENT, DESCENT = 0.62 * 11, 10, 3        # the label box the report promises


def analyze(name: str, *args) -> str:
    proc = subprocess.run([sys.executable, "-m", "dcpdissect", "analyze",
                           str(SAMPLES / f"{name}.pcap"), "--fail-on", "never", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, str]:
    out = {}
    for name in NAMES:
        path = tmp_path_factory.mktemp("html") / f"{name}.html"
        analyze(name, "--format", "html", "-o", str(path))
        out[name] = path.read_text(encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def records() -> dict[str, list[dict]]:
    return {name: [r for r in map(json.loads, analyze(name, "--format", "jsonl").splitlines())
                   if "rule" in r] for name in NAMES}


def rows(page: str) -> list[tuple[int, str]]:
    """(number, row html) of every finding row."""
    return [(int(n), row) for n, row in re.findall(r'<tr id="finding-(\d+)">(.*?)</tr>', page)]


def figures(page: str) -> dict[str, str]:
    return dict(re.findall(r'<figure id="(timeline-\d+)">(.*?)</figure>', page, re.S))


def svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(s) for s in re.findall(r"<svg .*?</svg>", page, re.S)]


def test_findings_come_first(pages):
    for page in pages.values():
        assert re.findall(r'<h2 id="([a-z]+)">', page) == [
            "findings", "details", "capture", "connections", "streams"]


def test_counts_by_severity_are_the_findings(pages, records):
    for name, page in pages.items():
        expected = sorted((r["frame"], r["rule"], r["severity"]) for r in records[name])
        got = [(int(re.search(r'<td class="num">(\d+)</td>', row).group(1)),
                re.search(r"<code>([a-z0-9-]+)</code>", row).group(1),
                re.search(r'class="sev-([a-z]+)"', row).group(1)) for _n, row in rows(page)]
        assert got == expected, name
        counts = re.search(r'<p class="counts">(.*?)</p>', page).group(1)
        shown = {sev: int(n) for n, sev in re.findall(r"(\d+) (error|warning|info)s?\b", counts)}
        assert shown == {sev: sum(1 for *_x, s in expected if s == sev)
                         for sev in ("error", "warning", "info")}, name
        assert re.search(rf"<b>{len(expected)} findings?</b>", counts)


@pytest.mark.tshark
def test_every_finding_in_detail(pages, records):
    """Rule title and rationale as the catalogue has them, the filter of its frames, and a
    hexdump whose bytes tshark finds in the TCP payload of the finding's frame."""
    page = pages["rollback-violations"]
    payloads = dict(line.split("\t") for line in subprocess.run(
        ["tshark", "-r", str(SAMPLES / "rollback-violations.pcap"), "-T", "fields",
         "-e", "frame.number", "-e", "tcp.payload"], capture_output=True, text=True,
        check=True).stdout.splitlines())
    for (n, _row), record in zip(rows(page), records["rollback-violations"]):
        rule = RULES[record["rule"]]
        section = page[page.index(f'<h3 id="rule-{record["rule"]}">'):]
        assert section.index(escape(rule.title)) < section.index("<section")
        assert f"Rationale: {escape(rule.rationale)}" in section
        detail = re.search(rf'<section id="detail-{n}">(.*?)</section>', page, re.S).group(1)
        assert (f"Wireshark filter: <code>frame.number in {{{record['frame']}}}</code>"
                in detail)
        dump = re.search(r"<pre>(.*?)</pre>", detail, re.S).group(1)
        data = "".join(line[6:53].replace(" ", "") for line in dump.splitlines()
                       if re.match(r"[0-9a-f]{4}  ", line))
        assert len(data) >= 48 and data in payloads[str(record["frame"])]


def test_links_go_both_ways(pages):
    for name, page in pages.items():
        ids = set(re.findall(r'\bid="([^"]+)"', page))
        assert set(re.findall(r'href="#([^"]+)"', page)) <= ids, name
        figs = figures(page)
        for n, row in rows(page):
            assert f'href="#detail-{n}"' in row
            link = re.search(r'href="#(timeline-\d+)"', row)
            if link is None:
                continue
            stars = re.findall(r'<a href="#finding-(\d+)"><title>finding ([#\d, ]+)</title>',
                               figs[link.group(1)])
            assert any(f"#{n}" in shown.split(", ") for _first, shown in stars), (name, n)
            for first, _shown in stars:        # each star's row leads back to its figure
                back = dict(rows(page))[int(first)]
                assert f'href="#{link.group(1)}"' in back
        assert len(figs) >= 1, name
        assert [int(k.split("-")[1]) for k in figs] == list(range(1, len(figs) + 1)), name


def test_one_colour_per_connection(pages):
    """A connection number has one colour in every table swatch and every plot of every
    page; connections 1, 2 and 3 three different ones."""
    by_conn: dict[str, set] = {}
    for page in pages.values():
        for colour, conn in re.findall(r'style="background:(#[0-9a-f]{6})"></span>(?:conn )?'
                                       r"(\d+)", page):
            by_conn.setdefault(conn, set()).add(colour)
        for svg in svgs(page):
            for g in svg.iter(f"{SVG}g"):
                if "data-conn" in g.attrib:
                    by_conn.setdefault(g.get("data-conn"), set()).add(g.get("color"))
    assert all(len(c) == 1 for c in by_conn.values()), by_conn
    assert {"1", "2", "3"} <= set(by_conn)
    assert len({next(iter(by_conn[c])) for c in ("1", "2", "3")}) == 3


def boxes(svg: ET.Element) -> list[tuple]:
    out = []
    for t in svg.iter(f"{SVG}text"):
        x, y, width = float(t.get("x")), float(t.get("y")), len(t.text) * CHAR
        x0 = {"start": x, "middle": x - width / 2, "end": x - width}[t.get("text-anchor")]
        out.append((x0, y - ASCENT, x0 + width, y + DESCENT, t.text))
    return out


def test_labels_never_overlap_nor_leave_the_plot(pages):
    count = 0
    for page in pages.values():
        for svg in svgs(page):
            _x, _y, width, height = map(float, svg.get("viewBox").split())
            found = boxes(svg)
            count += len(found)
            for a in found:
                assert 0 <= a[0] and a[2] <= width and 0 <= a[1] and a[3] <= height, a
            for a, b in combinations(found, 2):
                assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)
    assert count > 50


def centre(shape: ET.Element) -> float:
    """The x of a point's glyph: its circle's centre, or the mean x of its path."""
    if shape.tag == f"{SVG}circle":
        return float(shape.get("cx"))
    xs = [float(x) for x in re.findall(r"[ML]([\d.]+),", shape.get("d"))]
    return sum(xs) / len(xs)


def test_a_rollback_loop_is_drawn_apart(pages):
    """vb 5 of rollback-violations as tshark decodes it: request frame 32, ROLLBACK frame
    34, the same request frame 36, ROLLBACK frame 38 (the rollback-loop finding)."""
    page = pages["rollback-violations"]
    (loop,) = [row for _n, row in rows(page) if "<code>rollback-loop</code>" in row]
    figure = figures(page)[re.search(r'href="#(timeline-\d+)"', loop).group(1)]
    xs = {}
    for svg in svgs(figure):
        for g in svg.iter(f"{SVG}g"):
            if g.get("data-conn") == "1":
                xs[int(g.get("data-frame"))] = centre(g[-1])
    order = [xs[f] for f in (32, 34, 36, 38)]
    assert all(b - a > 10 for a, b in zip(order, order[1:])), order


def test_streams_are_keyed_by_server(pages):
    """replica-node-violations: vb 6 is streamed from 10.0.5.1 (conn 1) and relayed to
    127.0.0.1 (conn 2); the timeline of conn 1's finding on vb 6 holds only conn 1.
    move-node-collapsed: the resume on 10.0.6.3 (conn 2) is drawn with the stream it
    resumes on 10.0.6.1 (conn 1)."""
    page = pages["replica-node-violations"]
    (row,) = [row for _n, row in rows(page) if "<code>relay-message-missing</code>" in row]
    figure = figures(page)[re.search(r'href="#(timeline-\d+)"', row).group(1)]
    assert "vbucket 6 of bucket default on 10.0.5.1:11209" in figure
    assert set(re.findall(r'data-conn="(\d+)"', figure)) == {"1"}
    figure = figures(pages["move-node-collapsed"])["timeline-1"]
    assert "vbucket 0 on 10.0.6.3:11210" in figure
    assert set(re.findall(r'data-conn="(\d+)"', figure)) == {"1", "2"}


def test_layout_in_headless_chromium(pages, tmp_path):
    """At 1400 x 1000: the counts and the findings table start above the fold, nothing is
    wider than the window, time cells keep one line, and the SVG labels as Chromium's font
    draws them do not overlap."""
    from test_html_report import LABEL_OVERLAPS, evaluate, open_page, problems

    path = tmp_path / "report.html"
    path.write_text(pages["rollback-violations"], encoding="utf-8")
    b, session = open_page(path.as_uri(), width=1400, height=1000)
    try:
        top = evaluate(b, session, """[document.querySelector('p.counts').getBoundingClientRect()
            .bottom, document.getElementById('findings').getBoundingClientRect().top,
            document.documentElement.scrollWidth]""")
        assert top[0] < 200 and top[1] < 400 and top[2] <= 1400, top
        lines = evaluate(b, session, """[...document.querySelectorAll('td.time')].map(td => {
            const r = document.createRange(); r.selectNodeContents(td);
            return r.getClientRects().length; })""")
        assert lines and set(lines) == {1}
        overlaps = evaluate(b, session, LABEL_OVERLAPS)
        assert overlaps and all(n == 0 for _count, n in overlaps), overlaps
        assert problems(b.events) == []
    finally:
        b.close()


def test_markdown_puts_the_findings_before_the_streams():
    text = analyze("rollback-violations", "--format", "markdown")
    heads = re.findall(r"^## (.+)$", text, re.M)
    assert heads[:2] == ["Capture", "Summary by rule"] and heads[-1] == "Streams"
    assert "## rollback-loop" in text


def test_each_event_is_drawn_once(pages):
    """resume-collapsed: the resumed stream and the resume share server and vbucket; each
    stream message is one point: per frame, as many as tshark decodes there (8: stream
    request, 10: its answer, 12: marker and 2 mutations, 28: the resume, 30: its answer,
    marker, mutation, deletion)."""
    figure = figures(pages["resume-collapsed"])["timeline-1"]
    assert Counter(re.findall(r'data-frame="(\d+)"', figure)) == {
        "8": 1, "10": 1, "12": 3, "28": 1, "30": 4}


def test_a_flood_of_findings_keeps_the_page_small(tmp_path):
    """hostile-findings-flood: 1000 findings of one rule get 100 rows and a count of the
    others; every link still leads somewhere."""
    path = tmp_path / "flood.html"
    analyze("hostile-findings-flood", "--format", "html", "-o", str(path))
    page = path.read_text(encoding="utf-8")
    assert len(rows(page)) == 101              # 100 of the flood, 1 info
    assert "900 more findings of" in page
    assert set(re.findall(r'href="#([^"]+)"', page)) <= set(re.findall(r'\bid="([^"]+)"', page))
    assert len(page) < 300_000


def test_timelines_are_bounded():
    """48 timelines at most, 6 for one rule; findings on a stream's open window share it."""
    from dcpdissect.analysis.findings import Finding
    from dcpdissect.reports.moments import MAX_WINDOWS, PER_RULE, MomentCollector

    assert (MAX_WINDOWS, PER_RULE) == (48, 6)
    moments = MomentCollector(lambda conn: ("10.0.0.1:11210", None))
    moments.note_findings([Finding(f"rule-{r}", "m", 10 * r + i, (), 0, 1, 10 * r + i)
                           for r in range(20) for i in range(10)])     # 200 vbuckets
    per_rule = Counter(w.findings[0][0].rule for w in moments.windows)
    assert len(moments.windows) == 48 and set(per_rule.values()) == {6}
    shared = MomentCollector(lambda conn: ("10.0.0.1:11210", None))
    shared.note_findings([Finding("rollback-loop", "m", frame, (), 0, 1, 5)
                          for frame in (34, 38)])
    assert len(shared.windows) == 1 and len(shared.windows[0].findings) == 2
