# Cython typing of header.py for the compiled kernel (dcpdissect/kernel.py).

cpdef tuple unpack(object buf, Py_ssize_t pos=*)
cpdef Py_ssize_t body_length(object buf, Py_ssize_t pos=*) except -1
cpdef Py_ssize_t frame_size(object buf, Py_ssize_t pos=*) except -1
