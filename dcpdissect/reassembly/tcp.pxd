# Cython typing of tcp.py for the compiled kernel (dcpdissect/kernel.py).
import cython


cdef class DirectionReassembler:
    cdef public object conn, direction, owner, stats, isn, fin_off, fin_frame, fin_ts
    cdef public DirectionReassembler peer
    cdef public bint mid_stream
    cdef public Py_ssize_t next_off, max_segments, max_bytes
    cdef public object _nseq, _prev, _acked
    cdef public list _starts, _pieces, _tail
    cdef public Py_ssize_t _buf_bytes, _tail_bytes, _tail_window, _tail_hi

    cpdef set_isn(self, object isn)
    cpdef Py_ssize_t offset_of(self, object seq) except? -1
    cpdef feed(self, object frame, object ts_ns, object seg)
    @cython.locals(n=Py_ssize_t, off=Py_ssize_t, tail=list, tb=Py_ssize_t)
    cdef _feed(self, object frame, object ts_ns, object seg)
    @cython.locals(n=Py_ssize_t, off=Py_ssize_t, out=list, missing=Py_ssize_t, wire=Py_ssize_t)
    cdef _feed_slow(self, object frame, object ts_ns, object seg)
    @cython.locals(nxt=Py_ssize_t, n=Py_ssize_t, blank=bint, retx=bint)
    cdef _accept(self, Py_ssize_t off, object data, object frame, object ts_ns, list out)
    @cython.locals(n=Py_ssize_t, tail=list, tb=Py_ssize_t)
    cdef _deliver(self, Py_ssize_t off, object data, object frame, object ts_ns, list out)
    @cython.locals(length=Py_ssize_t)
    cdef _gap(self, Py_ssize_t upto, object frame, object ts_ns, list out)
    @cython.locals(tail=list, keep=Py_ssize_t, k=Py_ssize_t, last=Py_ssize_t, size=Py_ssize_t,
                   n=Py_ssize_t)
    cdef Py_ssize_t _trim_tail(self, Py_ssize_t tb) except? -1
    @cython.locals(end=Py_ssize_t, tail=list, s=Py_ssize_t, e=Py_ssize_t, a=Py_ssize_t,
                   b=Py_ssize_t)
    cdef _compare_delivered(self, Py_ssize_t off, object data, object frame, object ts_ns,
                            list out)
    cdef _mismatch(self, Py_ssize_t a, Py_ssize_t b, object frame, object ts_ns, list out)
    @cython.locals(starts=list, pieces=list, end=Py_ssize_t, i=Py_ssize_t, cur=Py_ssize_t,
                   new=list, overlapped=bint, mismatched=bint, nb=Py_ssize_t, bs=Py_ssize_t,
                   be=Py_ssize_t, a=Py_ssize_t, b=Py_ssize_t, k=Py_ssize_t)
    cdef bint _insert(self, Py_ssize_t off, object data, object frame, object ts_ns,
                      list out) except -1
    @cython.locals(starts=list, pieces=list, off=Py_ssize_t, nxt=Py_ssize_t)
    cdef _drain(self, list out)
    cdef _overflow(self, object frame, object ts_ns, list out)
    cdef Py_ssize_t _jump(self, object seq, Py_ssize_t off, object frame, object ts_ns,
                          list out) except? -1
    @cython.locals(upto=Py_ssize_t, out=list, starts=list)
    cpdef acked(self, object ack, object frame, object ts_ns)
    @cython.locals(out=list, pieces=list)
    cpdef list flush(self)
