# Cython typing of packets.py for the compiled kernel (dcpdissect/kernel.py).
import cython


cdef class Decoder:
    cdef public object vxlan_ports, defragmenter, last_fragment, vxlan_like, frame, ts_ns
    cdef public object within, log
    cdef public dict addresses
    cdef public Py_ssize_t fragments, depth

    cpdef decode_frame(self, object linktype, object data, object frame, object ts_ns)
    cpdef decode(self, object linktype, object data)
    cpdef fragment(self, tuple key, Py_ssize_t offset, object more, bytes chunk, Py_ssize_t wire,
                   object proto, object fam, bytes src, bytes dst)


@cython.locals(hl=Py_ssize_t, doff=int)
cdef _tcp(bytes data, Py_ssize_t t, Py_ssize_t end, Py_ssize_t missing, object fam, bytes src,
          bytes dst, Decoder dec)

@cython.locals(known=dict)
cdef str _text(object fam, bytes packed, Decoder dec)

@cython.locals(vihl=int, total=Py_ssize_t, frag=int, proto=int, ihl=Py_ssize_t,
               avail=Py_ssize_t, missing=Py_ssize_t, p=Py_ssize_t)
cdef _ipv4(bytes data, Py_ssize_t off, Py_ssize_t end, Decoder dec)

@cython.locals(p=Py_ssize_t, plen=Py_ssize_t, nh=int, avail=Py_ssize_t, missing=Py_ssize_t)
cdef _ipv6(bytes data, Py_ssize_t off, Py_ssize_t end, Decoder dec)

@cython.locals(hl=Py_ssize_t, frag=int)
cdef _ip6_chain(bytes data, Py_ssize_t p, Py_ssize_t end, Py_ssize_t missing, int nh, bytes src,
                bytes dst, Decoder dec)

cdef _carried(bytes data, Py_ssize_t p, Py_ssize_t end, Py_ssize_t missing, int proto,
              object fam, bytes src, bytes dst, Decoder dec)

cdef _through(bytes data, tuple inner, Decoder dec, str ends=*)

cdef _ether(bytes data, int etype, Py_ssize_t off, Py_ssize_t end, Decoder dec)

@cython.locals(v=int)
cdef _ip_any(bytes data, Py_ssize_t off, Decoder dec)

cdef _bsd_family(bytes data, Decoder dec)
