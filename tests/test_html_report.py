"""``analyze --format html``: one self-contained page, opened in a real headless Chromium
(Debian's package) driven over the DevTools protocol (``--remote-debugging-pipe``): no
console error, no request but the page itself, the finding rows, and the timeline's
finding marker linked to its row. Also ``--plot`` and ``-o``."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def run_cli(*args, check_rc=None):
    proc = subprocess.run([sys.executable, "-m", "dcpdissect", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stderr
    return proc


class Browser:
    """Headless Chromium spoken to over the DevTools protocol on fds 3/4 (NUL-separated
    JSON messages)."""

    def __init__(self):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def fds():
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=fds, pass_fds=(3, 4, to_chrome_r, from_chrome_w))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, "Chromium did not answer in time"
            ready, _, _ = select.select([self.from_chrome], [], [], left)
            if ready:
                chunk = os.read(self.from_chrome, 1 << 16)
                assert chunk, "Chromium closed the DevTools pipe"
                self.buf += chunk
        raw, _, self.buf = self.buf.partition(b"\0")
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self.next_id:
                assert "error" not in reply, reply
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        while True:
            ev = self._read(deadline)
            self.events.append(ev)
            if ev.get("method") == method:
                return ev

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_chrome)
        os.close(self.from_chrome)


# Per SVG of the page: [its text labels, pairs of them overlapping as the browser draws them]
LABEL_OVERLAPS = """[...document.querySelectorAll('svg')].map(svg => {
    const bs = [...svg.querySelectorAll('text')].map(t => t.getBBox());
    let n = 0;
    for (let i = 0; i < bs.length; i++) for (let j = i + 1; j < bs.length; j++) {
        const a = bs[i], c = bs[j];
        if (a.x < c.x + c.width && c.x < a.x + a.width &&
            a.y < c.y + c.height && c.y < a.y + a.height) n++; }
    return [bs.length, n]; })"""


def open_page(url: str, width: int = 1280, height: int = 1000):
    """(browser, session id) with the page loaded and its console, log and network
    events recorded from before the navigation."""
    assert CHROMIUM, "chromium is not installed (scripts/setup.sh installs it)"
    b = Browser()
    target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        b.send(f"{domain}.enable", session=session)
    b.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                 "deviceScaleFactor": 1, "mobile": False},
           session=session)
    b.send("Page.navigate", {"url": url}, session=session)
    b.wait_for("Page.loadEventFired")
    return b, session


def evaluate(b: Browser, session: str, expression: str):
    result = b.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                    session=session)
    assert "exceptionDetails" not in result, result
    return result["result"].get("value")


def problems(events: list[dict]) -> list[str]:
    """Console errors, uncaught exceptions and error log entries of the page."""
    out = []
    for ev in events:
        method, params = ev.get("method"), ev.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            out.append(f"console.{params['type']}: {params.get('args')}")
        elif method == "Runtime.exceptionThrown":
            out.append(f"exception: {params.get('exceptionDetails')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            out.append(f"log: {params['entry'].get('text')}")
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("html") / "report.html"
    proc = run_cli("analyze", SAMPLES / "resume-collapsed.pcap", "--format", "html",
                   "-o", out, check_rc=1)
    assert proc.stdout == ""
    return out


def test_report_is_self_contained(report):
    text = report.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    # nothing to fetch: no external reference of any kind
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", text)
    assert "http://" not in text.replace("http://www.w3.org/", "")
    assert "https://" not in text
    assert "@import" not in text and "url(http" not in text and "<script" not in text
    assert "<link" not in text
    # the summary: file, SHA-256 (as sha256sum prints it), frames, connections, messages
    digest = subprocess.run(["sha256sum", str(SAMPLES / "resume-collapsed.pcap")],
                            capture_output=True, text=True, check=True).stdout.split()[0]
    assert digest in text
    assert "<th>frames</th><td>34</td>" in text
    assert "<th>messages</th><td>16</td>" in text
    assert "0.050016 s" in text
    # the streams table: the first stream from 0, the resume from {3,3} start 3 (uuid 4369)
    streams = text[text.index('<h2 id="streams">'):]
    assert streams.count("<tr><td>") == 2
    assert "<td>3..max uuid 4369 snap [3,3]</td>" in streams


def test_report_in_headless_chromium(report, tmp_path):
    url = report.as_uri()
    b, session = open_page(url)
    try:
        rows = evaluate(b, session, """[...document.querySelectorAll('tr[id^="finding-"]')]
            .map(r => [r.id, r.cells[1].textContent, r.cells[6].textContent])""")
        assert rows == [["finding-1", "28", "resume-collapsed-snapshot"]]
        # the timeline: an inline SVG whose finding marker is a link to the row
        links = evaluate(b, session, """[...document.querySelectorAll('figure svg a')]
            .map(a => a.getAttribute('xlink:href') || a.getAttribute('href'))""")
        assert links == ["#finding-1"]
        marker = evaluate(b, session, """(() => {
            const a = document.querySelector('figure svg a');
            const r = a.getBoundingClientRect();
            return [r.width > 0 && r.height > 0,
                    a.closest('g[id="findings-timeline-1"]') !== null, a.closest('figure').id];
        })()""")
        assert marker == [True, True, "timeline-1"]
        # a real mouse click on the marker reaches the row
        x, y = evaluate(b, session, """(() => {
            const a = document.querySelector('figure svg a');
            a.scrollIntoView({block: 'center'});
            const r = a.getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2];
        })()""")
        for kind in ("mousePressed", "mouseReleased"):
            b.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y,
                                                "button": "left", "clickCount": 1},
                   session=session)
        deadline = time.monotonic() + 10
        while evaluate(b, session, "location.hash") != "#finding-1":
            assert time.monotonic() < deadline, "the click on the marker did not follow its link"
            time.sleep(0.05)
        assert evaluate(b, session, "document.querySelectorAll('figure svg').length") == 1
        shot = b.send("Page.captureScreenshot", {"format": "png"}, session=session)
        assert len(shot["data"]) > 10_000
        urls = [ev["params"]["request"]["url"] for ev in b.events
                if ev.get("method") == "Network.requestWillBeSent"]
        assert urls == [url], urls
        assert problems(b.events) == []
    finally:
        b.close()


def test_console_errors_are_seen(tmp_path):
    """The browser check itself: a page with a console error and a fetch is caught."""
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><body><img src='https://example.invalid/x.png'>"
                    "<script>console.error('boom')</script></body></html>")
    b, _session = open_page(page.as_uri())
    try:
        assert any("boom" in p for p in problems(b.events))
        urls = [ev["params"]["request"]["url"] for ev in b.events
                if ev.get("method") == "Network.requestWillBeSent"]
        assert "https://example.invalid/x.png" in urls
    finally:
        b.close()


def test_capture_strings_are_escaped(tmp_path):
    """A DcpOpen name with markup is shown as text, never as markup."""
    from dcpdissect.analysis.findings import Finding
    from dcpdissect.reassembly.pdus import Summary
    from dcpdissect.reports.connections import ConnectionLegend
    from dcpdissect.reports.html import html_report
    from dcpdissect.reports.moments import MomentCollector

    f = Finding("resume-collapsed-snapshot", "<script>alert(1)</script> & \"x\"", 3, (3,),
                1_700_000_000_000_000_000, 1, 0)
    legend = ConnectionLegend()
    page = html_report(SAMPLES / "resume-collapsed.pcap", [f], Summary(), legend,
                       MomentCollector(legend.where))
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;x&quot;" in page


def test_plots_per_bucket_and_vbucket(tmp_path):
    """identity-two-buckets: vb 0 of bucket-a (connections 1, 3) and of bucket-b (2, 4),
    as SelectBucket chose them."""
    plots = tmp_path / "plots"
    run_cli("analyze", SAMPLES / "identity-two-buckets.pcap", "--plot", plots, check_rc=0)
    assert sorted(p.name for p in plots.iterdir()) == [
        "timeline-bucket-a-vb0.png", "timeline-bucket-a-vb0.svg",
        "timeline-bucket-b-vb0.png", "timeline-bucket-b-vb0.svg"]
    from dcpdissect.analysis.session import Pass
    from dcpdissect.reassembly.pdus import iter_events
    from dcpdissect.reports.connections import ConnectionLegend
    from dcpdissect.reports.timeline import TimelineCollector

    c, legend = TimelineCollector(), ConnectionLegend()
    Pass([c, legend]).run(iter_events(str(SAMPLES / "identity-two-buckets.pcap")))
    lanes = c.vbuckets(lambda conn: legend.record(conn)["bucket"])
    assert {w: sorted(lane.conn for lane in ls) for w, ls in lanes.items()} == {
        ("bucket-a", 0): [1, 3], ("bucket-b", 0): [2, 4]}


def test_plot_writes_svg_and_png(tmp_path):
    plots = tmp_path / "plots"
    proc = run_cli("analyze", SAMPLES / "rollback-correct.pcap", "--plot", plots,
                   "--fail-on", "never", check_rc=0)
    assert sorted(p.name for p in plots.iterdir()) == ["timeline-vb3.png", "timeline-vb3.svg"]
    assert (plots / "timeline-vb3.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    svg = (plots / "timeline-vb3.svg").read_text()
    assert "<svg" in svg
    assert "2 timeline files written" in proc.stderr
    # the table still goes to stdout
    assert "no findings" in proc.stdout or "rule" in proc.stdout


@pytest.mark.parametrize("fmt", ["table", "jsonl", "markdown"])
def test_output_file_for_every_format(tmp_path, fmt):
    target = tmp_path / f"report.{fmt}"
    to_file = run_cli("analyze", SAMPLES / "resume-collapsed.pcap", "--format", fmt,
                      "-o", target, check_rc=1)
    to_stdout = run_cli("analyze", SAMPLES / "resume-collapsed.pcap", "--format", fmt,
                        check_rc=1)
    assert to_file.stdout == ""
    assert target.read_text(encoding="utf-8") == to_stdout.stdout
    assert "resume-collapsed-snapshot" in to_stdout.stdout


def test_output_that_cannot_be_written(tmp_path):
    proc = run_cli("analyze", SAMPLES / "resume-collapsed.pcap", "-o",
                   tmp_path / "missing" / "r.html", "--format", "html", check_rc=2)
    assert proc.stderr.startswith("dcpdissect: error: --output ")
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_timeline_collects_what_the_stream_shows():
    """rollback-correct: a request {1,4} start 3 answered with rollback to 1, the request
    {1,1} start 1, then snapshot [1,5] with items 2..5 (as dissect lists them)."""
    from dcpdissect.analysis.session import Pass
    from dcpdissect.reassembly.pdus import iter_events
    from dcpdissect.reports.timeline import TimelineCollector

    c = TimelineCollector()
    Pass([c]).run(iter_events(str(SAMPLES / "rollback-correct.pcap")))
    (lane,) = c.vbuckets()[(None, 3)]
    assert (lane.conn, lane.vb, lane.sid) == (1, 3, None)
    assert [(start, s, e, frame) for _ts, start, s, e, frame in lane.requests] == \
        [(3, 1, 4, 12), (1, 1, 1, 16)]
    assert [(seqno, frame) for _ts, seqno, frame in lane.rollbacks] == [(1, 14)]
    assert [(s, e, frame) for _ts, s, e, frame in lane.snapshots] == [(1, 5, 20)]
    assert [(seqno, name) for _ts, seqno, name, _f in lane.items] == \
        [(2, "DcpMutation"), (3, "DcpMutation"), (4, "DcpMutation"), (5, "DcpMutation")]
    assert c.gaps == {}


def test_gaps_are_drawn(tmp_path):
    """tcp-loss loses a segment: the plot has a gap line at the frame of analyze's
    capture-gap finding."""
    plots = tmp_path / "plots"
    proc = run_cli("analyze", SAMPLES / "tcp-loss.pcap", "--plot", plots, "--format", "jsonl",
                   "--fail-on", "never", check_rc=0)
    gaps = [r for r in map(json.loads, proc.stdout.splitlines()) if r.get("rule") == "capture-gap"]
    assert len(gaps) == 1
    svg = (plots / "timeline-vb0.svg").read_text()
    assert f'id="gap-conn{gaps[0]["connection"]}-frame{gaps[0]["frame"]}"' in svg
    assert (plots / "timeline-vb0.png").stat().st_size > 10_000


def test_redact_scrubs_keys_from_the_page(tmp_path):
    """durability-violations' findings name the keys 'a' and 'b'; --redact scrubs them."""
    plain, redacted = tmp_path / "plain.html", tmp_path / "redacted.html"
    run_cli("analyze", SAMPLES / "durability-violations.pcap", "--format", "html", "-o", plain,
            "--fail-on", "never", check_rc=0)
    run_cli("analyze", SAMPLES / "durability-violations.pcap", "--format", "html", "-o",
            redacted, "--redact", "--fail-on", "never", check_rc=0)
    assert "commit of &#x27;a&#x27; on vb 0" in plain.read_text()
    text = redacted.read_text()
    # the key is a one-character pseudonym, not itself, the same wherever it is named
    [a] = set(re.findall(r"commit of &#x27;([A-Za-z0-9_.:-])&#x27; on vb 0", text))
    assert a != "a"
    assert "Redacted: document keys are replaced by pseudonyms" in text


def test_timeline_memory_is_bounded():
    from dcpdissect.reports.timeline import MAX_POINTS, Sampled

    kept = Sampled()
    for n in range(10 * MAX_POINTS + 7):
        kept.offer(n)
    assert MAX_POINTS // 2 <= len(kept) <= MAX_POINTS
    assert kept[0] == 0 and kept == sorted(kept)
    steps = {b - a for a, b in zip(kept, kept[1:])}
    assert steps == {kept.stride}                # evenly spread over everything offered
    assert kept[-1] >= 10 * MAX_POINTS - kept.stride


def test_plot_into_a_file_is_refused_before_reading(tmp_path):
    target = tmp_path / "a-file"
    target.write_text("")
    proc = run_cli("analyze", SAMPLES / "resume-collapsed.pcap", "--plot", target, check_rc=2)
    assert proc.stderr == f"dcpdissect: error: --plot {target}: not a directory\n"
    assert proc.stdout == ""
