"""Engine-agnostic stages of the pipeline: the local ``analyze`` run split so that an
engine can run its parts in parallel and still produce the same result.

Stage A (per chunk, parallel)
    :func:`~.frames.index_chunk`: where the frames of each TCP flow lie in one
    :class:`~.chunks.Piece` (offsets, no payload), plus the chunk's counts.
Driver
    :class:`~.merge.FileMerge`: the flows of a file packed into analysis groups by bytes,
    with the connection numbers it foresees.
Stage B (per analysis group, parallel)
    :func:`~.groups.run_group`: the group's frames read again by offset and analysed as
    ``analyze`` does (a :class:`~dcpdissect.analysis.session.Pass`), each event and
    finding placed by its moment;
    groups that share a coupling key, or whose numbers were not foreseen, run again
    merged (:meth:`~.merge.FileMerge.again`); the results are merged in ``analyze``'s order.

Departures from one shared connection table and analyzer: the ``max_connections`` cap,
the bounded memory of closed and TLS 4-tuples and the analyzer's bounds on names, proxy
pairs, pending requests and durability streams apply per analysis group (see
:mod:`.groups`).

:func:`run_local` chains the stages in one process (the reference for engine drivers and
for tests). :func:`~.filepass.analyze_whole` is the path for a file read whole in one task:
the ``analyze`` pass itself, plus the rows of the ``messages`` and ``streams`` tables
(:mod:`.tables`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from ..capture.fileset import FileSet, capture_files, group_rings
from ..reassembly.pdus import Options, Summary
from .chunks import FileIndex, index_file
from .filepass import analyze_whole
from .frames import index_chunk
from .groups import TcpClock, run_group
from .merge import FileMerge

# -- inputs ------------------------------------------------------------------------------

expand_inputs = capture_files       # files, directories (recursively) and globs -> paths


def capture_units(paths: list[str], one_capture: bool = False) -> list:
    """The captures the pipeline judges each on its own: a path, or a
    :class:`~dcpdissect.capture.fileset.FileSet` for the files of one ring buffer
    (:func:`~dcpdissect.capture.fileset.group_rings`), or for all of ``paths`` with
    ``one_capture``."""
    if one_capture and len(paths) > 1:
        return [FileSet(paths)]
    return [g[0] if len(g) == 1 else FileSet(g) for g in group_rings(paths)]


def index_inputs(paths: list[str], chunk_size: int) -> list[FileIndex]:
    return [index_file(p, chunk_size) for p in paths]

# -- the whole thing in one process ------------------------------------------------------------

class FileResult(NamedTuple):
    path: str
    findings: list
    summary: Summary
    messages: int
    connections: list
    errors: list
    events: list | None = None
    streams: list | None = None     # rows of STREAM_COLUMNS
    reruns: int = 0                 # analysis groups run again (coupled or renumbered)


def run_local(inputs: Iterable[str], options: Options | None = None,
              chunk_size: int = 256 << 20, block_frames: int | None = None,
              groups: int = 4, keep_events: bool = False,
              clock: bool = True) -> dict[str, FileResult]:
    """Every stage in this process, in the order an engine would run them: unsplittable
    (compressed) files and file sets (:func:`capture_units`) whole, the others indexed per
    chunk (stage A), their flows packed into about ``groups`` analysis groups and analysed
    per group (stage B), groups run again as :mod:`.merge` asks, the results merged; a file whose stage A met IP fragments
    is read whole after all. ``keep_events``: the merged events of chunked files in
    :attr:`FileResult.events`; ``clock=False`` leaves the file-wide clock out (lingering
    FINs then expire only on a group's own frames)."""
    options = options or Options()
    results = {}
    for path in capture_units(expand_inputs(inputs)):
        if isinstance(path, FileSet):
            results[str(path)] = _whole_result(path, options)
            continue
        idx = index_file(path, chunk_size, block_frames) if block_frames else \
            index_file(path, chunk_size)
        if not idx.splittable and idx.error is None:
            results[path] = _whole_result(path, options)
            continue
        fm = FileMerge(idx, options, groups)
        for piece in idx.chunks:                        # stage A
            fm.add_chunk(*index_chunk(piece, options))
        if fm.fragmented:
            results[path] = _whole_result(path, options)
            continue
        todo = fm.plan()
        while todo:                                     # stage B, then the runs again
            for task in todo:
                got = []
                for _cols in run_group(path, task.group, task.flows, task.options, task.numbers,
                                       clock_for(idx, task.options) if clock else None, got,
                                       keep_events=keep_events):
                    pass
                fm.add_result(got[0])
            todo = fm.again()
        m = fm.merged()
        results[path] = FileResult(path, m.findings, m.summary, m.messages, m.connections,
                                   m.errors, m.events, m.streams, fm.reruns)
    return results


def _whole_result(path, options: Options) -> FileResult:
    """:func:`analyze_whole` of one file or file set as a :class:`FileResult`."""
    got: list = []
    for _cols in analyze_whole(path, options, got):
        pass
    w = got[0]
    return FileResult(w.path, w.findings, w.summary, w.messages, w.connections,
                      [w.error] if w.error else [], None, w.streams)


def clock_for(index: FileIndex, options: Options | None = None):
    """The :class:`~.groups.TcpClock` of an indexed file (decoding as ``options`` say)."""
    return TcpClock(index.blocks if index.splittable else index.chunks,
                    vxlan_ports=options.vxlan_ports if options else ())
