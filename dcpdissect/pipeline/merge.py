"""The driver's part of the chunked pipeline, per capture file: analysis groups planned
from the frame index, run again where they must be, and merged into ``analyze``'s result.

1. :meth:`FileMerge.add_chunk` gathers stage A's per-flow frame lists.
2. :meth:`FileMerge.plan` packs the flows into about ``groups`` analysis groups by bytes
   (a flow, a 4-tuple both ways, is never split) and foresees the connection numbers: a
   flow on a port decoded at once gets a number at its first segment that can open a
   connection and at each SYN with a new ISN (see :mod:`.groups`).
3. :meth:`FileMerge.again`, once every group reported: the groups that share a coupling
   key (:func:`~.groups.coupling_keys`) are merged (union-find) and run again as one, and
   so is a group whose numbers differ from the rank of its moments among all groups'.
   Keys and moments are properties of a connection's own frames, so one more round is
   enough: the second call returns nothing.
4. :meth:`FileMerge.merged`: findings in the order ``analyze`` meets them, capped per rule
   as the Analyzer caps them, then sorted; summary, connections and streams.
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import NamedTuple

from ..analysis.engine import not_mcbp_finding
from ..analysis.findings import MAX_FINDINGS_PER_RULE, Finding, FindingCap
from ..analysis.rules.framing import CONNECTIONS_NOT_MCBP, UNCAPTURED_NOT_JUDGED
from ..analysis.stream_summary import findings_by_stream
from ..capture.order import position
from ..capture.readers import TLS_KEY_LOG
from ..reassembly.pdus import Options
from ..reports.streams import SEVERITIES, _order
from .chunks import FileIndex
from .frames import ChunkStats, FlowFrames, flow_ports, merge_flow
from .coupling import ANSWERS_ADD
from .tables import ConnRow, FileTotals, record_rows


class Task(NamedTuple):
    """One run of stage B: analysis group ``group`` (unique per run) of a file."""
    path: str
    group: int
    flows: list                 # [FlowFrames]
    numbers: dict               # moment -> [connection numbers, in order]
    options: Options | None = None      # the file's (its own TLS secrets added)


class Merged(NamedTuple):
    findings: list
    summary: object
    messages: int
    connections: list           # [ConnRow], by connection number
    streams: list               # rows of core.STREAM_COLUMNS
    errors: list
    events: list | None         # every event in analyze's order, when the groups kept them


class _Stream:
    """What finding counts and row order need of a stream record."""
    __slots__ = ("conn", "vbucket", "stream_id", "opaque", "first_frame")

    class _Conn(NamedTuple):
        id: int

    def __init__(self, r: dict):
        self.conn = self._Conn(r["connection"])
        self.vbucket, self.stream_id = r["vbucket"], r["stream_id"]
        self.opaque, self.first_frame = r["opaque"], r["first_frame"]


def file_options(options: Options, index: FileIndex) -> Options:
    """``options`` with the TLS key log lines of the file's decryption secrets blocks, each
    at its place (:attr:`Options.tls_secrets`)."""
    found = tuple((after, data.decode("ascii", "replace"))
                  for after, stype, data in index.secrets if stype == TLS_KEY_LOG)
    return dataclasses.replace(options, tls_secrets=options.tls_secrets + found) if found \
        else options


class FileMerge:
    def __init__(self, index: FileIndex, options: Options, groups: int):
        self.index = index
        self.options = file_options(options, index)
        self.groups = max(1, groups)
        self.parts: dict[str, list] = {}        # flow -> [(first frame of chunk, FlowFrames)]
        self.chunks: list[ChunkStats] = []
        self.flows: dict[str, FlowFrames] = {}
        self.members: dict[int, list[str]] = {}     # group -> its flows
        self.results: dict = {}                     # group -> GroupResult (the latest runs)
        self.next_group = 0
        self.rounds = 0
        self.reruns = 0

    # -- 1, 2 ------------------------------------------------------------------------------
    def add_chunk(self, stats: ChunkStats, flows: dict[str, FlowFrames]) -> None:
        self.chunks.append(stats)
        for key, ff in flows.items():
            self.parts.setdefault(key, []).append((stats.first_frame, ff))

    @property
    def fragmented(self) -> bool:
        """Stage A met IP fragments: they belong to no flow until reassembled, so the file
        must be read whole (:func:`.core.analyze_whole`) instead of planned."""
        return any(c.fragments for c in self.chunks)

    def plan(self) -> list[Task]:
        for key, parts in self.parts.items():
            parts.sort(key=lambda p: p[0])
            self.flows[key] = merge_flow([ff for _f, ff in parts])
        self.parts.clear()
        bins = [(0, i, []) for i in range(min(self.groups, len(self.flows)))]
        for key in sorted(self.flows, key=lambda k: (-self.flows[k].nbytes, k)):
            load, i, members = heapq.heappop(bins)
            members.append(key)
            heapq.heappush(bins, (load + self.flows[key].nbytes + 1, i, members))
        foreseen = self._foresee()
        tasks = []
        for _load, _i, members in sorted(bins, key=lambda b: b[1]):
            numbers: dict = {}
            for key in members:
                for moment, number in foreseen.get(key, ()):
                    numbers.setdefault(moment, []).append(number)
            tasks.append(self._task(members, numbers))
        return tasks

    def _foresee(self) -> dict[str, list]:
        """flow -> [(moment, number)] of the connections numbered as they open."""
        o = self.options
        at_once_everywhere = not (o.heuristic or o.any_port)
        ports = o.server_ports
        opens = []
        for key, ff in self.flows.items():
            if not ff.first_open or not (at_once_everywhere or set(flow_ports(key)) & ports):
                continue
            opens.append((ff.first_open, key))
            isn = None
            syns = ff.syns
            for i in range(0, len(syns), 3):
                at, seq = position(syns[i], syns[i + 1]), syns[i + 2]
                if at == ff.first_open:
                    isn = seq
                elif at > ff.first_open and seq != isn:
                    opens.append((at, key))
                    isn = seq
        out: dict[str, list] = {}
        for number, (at, key) in enumerate(sorted(opens), 1):
            out.setdefault(key, []).append(((at, 1, 0), number))
        return out

    def _task(self, members: list[str], numbers: dict) -> Task:
        group = self.next_group
        self.next_group += 1
        self.members[group] = members
        return Task(self.index.path, group, [self.flows[k] for k in members], numbers,
                    self.options)

    # -- 3 ---------------------------------------------------------------------------------
    def add_result(self, result) -> None:
        self.results[result.group] = result

    def again(self) -> list[Task]:
        """The runs still needed (none when the results are consistent). Keys and moments
        of a connection do not depend on its group, so a second round never needs a third
        (short of the per-group bounds listed in :mod:`.groups`: then the second round's
        results stand)."""
        self.rounds += 1
        if self.rounds > 1:
            return []
        numbers = self._numbers()
        parent = {g: g for g in self.results}

        def root(g):
            while parent[g] != g:
                parent[g] = parent[parent[g]]
                g = parent[g]
            return g

        owner: dict = {}
        answers = []
        for g in sorted(self.results):
            for key in self.results[g].coupling:
                if key[0] == ANSWERS_ADD[0]:     # meets an Add Stream's key, not its like
                    answers.append((("add",) + key[1:], g))
                    continue
                other = owner.setdefault(key, g)
                if other != g:
                    parent[root(g)] = root(other)
        for key, g in answers:
            other = owner.get(key)
            if other is not None and root(other) != root(g):
                parent[root(g)] = root(other)
        sets: dict[int, list[int]] = {}
        for g in sorted(self.results):
            sets.setdefault(root(g), []).append(g)
        tasks = []
        for groups in sets.values():
            renumbered = any(number != numbers[(m, n)] for g in groups
                             for m, n, number in self.results[g].numbered)
            if len(groups) == 1 and not renumbered:
                continue
            members = [k for g in groups for k in self.members.pop(g)]
            exact: dict = {}
            for g in groups:
                for m, n, _number in self.results.pop(g).numbered:
                    exact.setdefault(m, []).append((n, numbers[(m, n)]))
            self.reruns += len(groups)
            tasks.append(self._task(members, {m: [x for _n, x in sorted(v)]
                                              for m, v in exact.items()}))
        return tasks

    def _numbers(self) -> dict:
        """(moment, n) -> the connection number analyze gives there."""
        moments = sorted((m, n) for r in self.results.values() for m, n, _x in r.numbered)
        return {mn: i for i, mn in enumerate(moments, 1)}

    # -- 4 ---------------------------------------------------------------------------------
    def merged(self, max_per_rule: int | None = None) -> Merged:
        results = [self.results[g] for g in sorted(self.results)]
        found = _first_notes(_one_not_mcbp(sorted(((m, f) for r in results
                                                   for m, f in zip(r.moments, r.findings)),
                                                  key=lambda mf: mf[0])))
        cap = FindingCap(max_per_rule or MAX_FINDINGS_PER_RULE)
        findings = cap.keep([f for _m, f in found]) + cap.dropped()
        findings.sort(key=Finding.sort_key)
        totals = FileTotals(self.index.path)
        totals.add_secrets(self.index.secrets)
        for c in self.chunks:
            totals.add_chunk(c)
        for r in results:
            totals.add_group(r)
        if self.index.error is not None:
            totals.errors.append(self.index.error)
        connections = sorted((c for r in results for c in r.connections),
                             key=lambda c: c.connection)
        records = [rec for r in results for rec in r.streams]
        streams = [_Stream(rec) for rec in records]
        counted = findings_by_stream(streams, findings)
        for i, rec in enumerate(records):
            for severity, column in SEVERITIES:
                rec[column] = counted.get(i, {}).get(severity, 0)
        order = sorted(range(len(records)), key=lambda i: _order(streams[i]))
        return Merged(findings, totals.summary(), sum(r.messages for r in results),
                      [ConnRow(*c) for c in connections],
                      record_rows(self.index.path, [records[i] for i in order]),
                      list(totals.errors), self._events(results))

    @staticmethod
    def _events(results) -> list | None:
        if any(r.events is None for r in results):
            return None
        return [ev for _m, ev in sorted((e for r in results for e in r.events),
                                        key=lambda e: e[0])]


def _first_notes(found: list) -> list:
    """(moment, finding) pairs with only the first ``uncaptured-not-judged`` note of each
    rule, as ``analyze`` says it once per capture (each group said it once)."""
    seen: set = set()
    out = []
    for m, f in found:
        if f.rule == UNCAPTURED_NOT_JUDGED.id:
            if f.fields["rule"] in seen:
                continue
            seen.add(f.fields["rule"])
        out.append((m, f))
    return out


def _one_not_mcbp(found: list) -> list:
    """(moment, finding) pairs with the groups' ``connections-not-mcbp`` findings (each
    counts its own flows) made one, as ``analyze`` reports it at the end of the capture."""
    parts = [(m, f) for m, f in found if f.rule == CONNECTIONS_NOT_MCBP.id]
    if len(parts) < 2:
        return found
    ports: dict = {}
    for _m, f in parts:
        for port, n in f.fields["ports"].items():
            ports[int(port)] = ports.get(int(port), 0) + n
    first = min((f for _m, f in parts), key=lambda f: f.frame)
    one = (max(m for m, _f in parts), not_mcbp_finding(ports, first.frame, first.ts_ns))
    return sorted([mf for mf in found if mf[1].rule != CONNECTIONS_NOT_MCBP.id] + [one],
                  key=lambda mf: mf[0])
