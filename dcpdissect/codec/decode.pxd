# Cython typing of decode.py for the compiled kernel (dcpdissect/kernel.py).
import cython

from dcpdissect.codec.header cimport unpack as unpack_header


cdef class Message:
    cdef public object magic, opcode, framing_len, keylen, extlen, datatype, vbucket, status
    cdef public object bodylen, opaque, cas, frame_infos, stream_id, extras, key, value
    cdef public object fields, layout, problems, spec, is_request, value_len


cdef class _Plan:
    cdef public object spec
    cdef public dict extras
    cdef public object sizes, values


cpdef _Plan _plan(int magic, int opcode, bint request)

@cython.locals(data=bytes, raw="const char *", m=Message, plan=_Plan, request=bint,
               framing_len=Py_ssize_t,
               keylen=Py_ssize_t, extlen=Py_ssize_t, bodylen=Py_ssize_t, end=Py_ssize_t,
               e_start=Py_ssize_t, k_start=Py_ssize_t, v_start=Py_ssize_t, problems=list,
               fields=dict, hit=tuple, names=tuple, values=tuple, i=Py_ssize_t)
cpdef Message decode(object buf)

@cython.locals(framing_len=Py_ssize_t, bodylen=Py_ssize_t, problems=list, n=Py_ssize_t)
cdef bint _cut_sections(Message m, bytes buf, bint request, Py_ssize_t e_start,
                        Py_ssize_t k_start, Py_ssize_t v_start, Py_ssize_t end) except -1

cdef _frame_infos(Message m, object raw, bint request)

@cython.locals(n=Py_ssize_t, whole=bint, facts=dict, candidates=list)
cdef _decode_value(Message m, tuple layouts)
