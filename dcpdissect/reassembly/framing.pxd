# Cython typing of framing.py for the compiled kernel (dcpdissect/kernel.py).
import cython

from dcpdissect.codec.header cimport frame_size, unpack


@cython.locals(c_end=Py_ssize_t)
cdef tuple _carrier(list chunks, Py_ssize_t ci, Py_ssize_t offset)


cdef class _Partial:
    cdef public object offset, data, size, frames, ts


cdef class PduFramer:
    cdef public object conn, direction
    cdef public bytearray buf
    cdef public Py_ssize_t base
    cdef public list chunks
    cdef public bint in_sync, started
    cdef public object resync_reason, skip_to, partial, last_frame, last_ts, framed_ts, now
    cdef public Py_ssize_t _pending_skip
    cdef public object _garbage_cause, _garbage_detail, _garbage_at

    cpdef list data(self, Py_ssize_t offset, object data, object frame, object ts_ns,
                    object now=*)
    cpdef list gap(self, Py_ssize_t offset, Py_ssize_t length, object frame, object ts_ns,
                   object cause=*)
    cpdef list close(self)
    @cython.locals(size=Py_ssize_t, start=Py_ssize_t, skip_to=Py_ssize_t)
    cdef _cut_in_sync(self, Py_ssize_t offset, Py_ssize_t length, object frame, object ts_ns,
                      object cause, list out)
    cdef _finish_partial(self, list out)
    cdef _hide(self, Py_ssize_t offset, Py_ssize_t length, object frame, object ts_ns,
               object cause, list out)
    cdef _skipped(self, Py_ssize_t n, object no_header_cause)
    cdef _give_up(self, list out)
    cdef _reset(self, Py_ssize_t offset)
    @cython.locals(end=Py_ssize_t, used=Py_ssize_t, c_end=Py_ssize_t)
    cdef tuple _consume(self, Py_ssize_t n)
    @cython.locals(drop=Py_ssize_t)
    cdef list _drain(self, bint final)
    @cython.locals(buf=bytearray, chunks=list, base=Py_ssize_t, n=Py_ssize_t, pos=Py_ssize_t,
                   ci=Py_ssize_t, bad=bint, header=Py_ssize_t, limit=Py_ssize_t,
                   size=Py_ssize_t, end=Py_ssize_t, abs_end=Py_ssize_t, c_end=Py_ssize_t,
                   view="const unsigned char *", b=Py_ssize_t)
    cdef bint _frame_run(self, list out) except -1
    @cython.locals(n=Py_ssize_t, pos=Py_ssize_t, nxt=Py_ssize_t, first=bint)
    cdef bint _resync(self, list out, bint final, bint at_cut=*) except -1
    cdef _discard(self, Py_ssize_t n)
