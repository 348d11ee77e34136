#include "key_encoding.hpp"

#include <cstdint>

namespace py = pybind11;

namespace permits::bind {
namespace {

constexpr int kMaxKeyDepth = 16;

void put_u32(KeyBuffer& out, std::size_t n) {
    const auto v = static_cast<std::uint32_t>(n);
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// A tag, the length inside tuples, the bytes (as for 's' and 'b' below).
void put_tagged(KeyBuffer& out, char tag, const char* data, Py_ssize_t size, int depth) {
    out.push_back(tag);
    if (depth > 0) {
        put_u32(out, static_cast<std::size_t>(size));
    }
    out.append(data, static_cast<std::size_t>(size));
}

// A str that UTF-8 cannot encode (lone surrogates: os.fsdecode, surrogateescape) is encoded with
// its surrogates as code points, under a tag of its own: no other str (tag 's', always valid
// UTF-8) nor bytes can share its encoding.
bool encode_unencodable(PyObject* key, KeyBuffer& out, int depth) {
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
        return false; // MemoryError...
    }
    PyErr_Clear();
    PyObject* bytes = PyUnicode_AsEncodedString(key, "utf-8", "surrogatepass");
    if (bytes == nullptr) {
        return false;
    }
    put_tagged(out, 'S', PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes), depth);
    Py_DECREF(bytes);
    return true;
}

} // namespace

// Lengths are written only inside tuples, where they keep the items apart: a top-level "user-42"
// is 8 bytes, short enough for a record's inline key (no heap block per key).
bool encode_key(PyObject* key, KeyBuffer& out, int depth) {
    if (PyUnicode_CheckExact(key) || PyUnicode_Check(key)) {
        Py_ssize_t size = 0;
        const char* utf8 = PyUnicode_AsUTF8AndSize(key, &size); // cached in the str object
        if (utf8 == nullptr) {
            return encode_unencodable(key, out, depth);
        }
        out.push_back('s');
        if (depth > 0) {
            put_u32(out, static_cast<std::size_t>(size));
        }
        out.append(utf8, static_cast<std::size_t>(size));
        return true;
    }
    if (PyLong_Check(key) && !PyBool_Check(key)) {
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (overflow == 0) {
            out.push_back('i');
            out.append(reinterpret_cast<const char*>(&v), sizeof v);
            return true;
        }
        // Larger ints: their hex digits, read from the value (an int subclass's __str__ plays no
        // part, and base 16 has no digit limit, unlike int -> str).
        PyObject* text = PyNumber_ToBase(key, 16);
        if (text == nullptr) {
            return false;
        }
        Py_ssize_t size = 0;
        const char* digits = PyUnicode_AsUTF8AndSize(text, &size); // ASCII
        if (digits == nullptr) {
            Py_DECREF(text);
            return false;
        }
        put_tagged(out, 'I', digits, size, depth);
        Py_DECREF(text);
        return true;
    }
    if (PyBytes_Check(key)) {
        out.push_back('b');
        if (depth > 0) {
            put_u32(out, static_cast<std::size_t>(PyBytes_GET_SIZE(key)));
        }
        out.append(PyBytes_AS_STRING(key), static_cast<std::size_t>(PyBytes_GET_SIZE(key)));
        return true;
    }
    if (PyTuple_Check(key)) {
        if (depth >= kMaxKeyDepth) {
            PyErr_Format(PyExc_ValueError, "a partition key may nest tuples at most %d deep", kMaxKeyDepth);
            return false;
        }
        out.push_back('t');
        put_u32(out, static_cast<std::size_t>(PyTuple_GET_SIZE(key)));
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key); ++i) {
            if (!encode_key(PyTuple_GET_ITEM(key, i), out, depth + 1)) {
                return false;
            }
        }
        return true;
    }
    PyErr_Format(PyExc_TypeError, "a partition key must be a str, bytes, int or a tuple of them, got %.100s",
                 Py_TYPE(key)->tp_name);
    return false;
}

std::string key_of(py::handle resource) {
    KeyBuffer key;
    if (!encode_key(resource.ptr(), key, 0)) {
        throw py::error_already_set();
    }
    return std::string(key.view());
}

} // namespace permits::bind
