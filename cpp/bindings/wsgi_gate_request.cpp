// The WSGI gate's reading of a request's key and writing of its RateLimit headers.
#include <cstring>

#include "wsgi_gate_parts.hpp"

namespace permits::py_wsgi_gate {

Names g_names{};

char* decimal(char* out, std::int64_t value) {
    char digits[24];
    int n = 0;
    std::uint64_t v = value < 0 ? 0 - static_cast<std::uint64_t>(value) : static_cast<std::uint64_t>(value);
    do {
        digits[n++] = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v != 0);
    if (value < 0) {
        *out++ = '-';
    }
    while (n > 0) {
        *out++ = digits[--n];
    }
    return out;
}

bool is_space(Py_UCS4 ch) {
    return Py_UNICODE_ISSPACE(ch) != 0;
}

namespace {

PyObject* ascii_text(const char* begin, const char* end) {
    return PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, begin, end - begin);
}

PyObject* decimal_text(std::int64_t value) {
    char buffer[24];
    return ascii_text(buffer, decimal(buffer, value));
}

// The RateLimit field's value: `"name";r=<remaining>;t=<reset>` (no t when time frees nothing).
PyObject* state_text(GateObject* g, std::int64_t remaining, std::int64_t reset) {
    Py_ssize_t size = 0;
    const char* prefix = PyUnicode_AsUTF8AndSize(g->state_prefix, &size); // (an RFC 8941 string: ASCII)
    if (prefix == nullptr) {
        return nullptr;
    }
    char buffer[256];
    if (size > static_cast<Py_ssize_t>(sizeof(buffer)) - 64) {
        return reset < 0 ? PyUnicode_FromFormat("%U;r=%lld", g->state_prefix, static_cast<long long>(remaining))
                         : PyUnicode_FromFormat("%U;r=%lld;t=%lld", g->state_prefix, static_cast<long long>(remaining),
                                                static_cast<long long>(reset));
    }
    std::memcpy(buffer, prefix, static_cast<std::size_t>(size));
    char* out = buffer + size;
    std::memcpy(out, ";r=", 3);
    out = decimal(out + 3, remaining);
    if (reset >= 0) {
        std::memcpy(out, ";t=", 3);
        out = decimal(out + 3, reset);
    }
    return ascii_text(buffer, out);
}

} // namespace

// The header (name, value); `value` a new reference, taken (nullptr: an error is set).
PyObject* pair(PyObject* name, PyObject* value) {
    if (value == nullptr) {
        return nullptr;
    }
    PyObject* p = PyTuple_Pack(2, name, value);
    Py_DECREF(value);
    return p;
}

PyObject* dict_get(PyObject* dict, PyObject* name) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject* found = nullptr;
    PyDict_GetItemRef(dict, name, &found);
    return found;
#else
    return Py_XNewRef(PyDict_GetItemWithError(dict, name));
#endif
}

// A dotted-quad IPv4 address as Python's ipaddress reads it (no leading zeros): then the key
// client_ip() makes of it is the text itself. Anything else is read by Python.
bool plain_ipv4(PyObject* text) {
    if (!PyUnicode_IS_ASCII(text)) {
        return false;
    }
    const Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (n < 7 || n > 15) {
        return false;
    }
    const auto* c = static_cast<const unsigned char*>(PyUnicode_DATA(text));
    int parts = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        int value = 0;
        Py_ssize_t digits = 0;
        const Py_ssize_t start = i;
        while (i < n && c[i] >= '0' && c[i] <= '9') {
            value = value * 10 + (c[i] - '0');
            ++i;
            ++digits;
        }
        if (digits == 0 || digits > 3 || value > 255 || (digits > 1 && c[start] == '0')) {
            return false;
        }
        ++parts;
        if (i == n) {
            break;
        }
        if (c[i] != '.' || parts == 4) {
            return false;
        }
        ++i;
        if (i == n) {
            return false; // a trailing dot
        }
    }
    return parts == 4;
}

PyObject* key_of(GateObject* g, PyObject* environ) {
    PyObject* found = nullptr;
    if (g->key_kind == kClientIp) {
        found = dict_get(environ, g_names.remote_addr);
        if (found != nullptr && PyUnicode_CheckExact(found) && plain_ipv4(found)) {
            return found;
        }
    } else if (g->key_kind == kHeader) {
        found = dict_get(environ, g->key_env);
        if (found != nullptr && PyUnicode_CheckExact(found)) {
            const Py_ssize_t n = PyUnicode_GET_LENGTH(found);
            PyObject* value = nullptr;
            if (n > 0 && !is_space(PyUnicode_READ_CHAR(found, 0)) && !is_space(PyUnicode_READ_CHAR(found, n - 1))) {
                value = Py_NewRef(found);
            } else if (n > 0) {
                value = PyObject_CallMethodNoArgs(found, g_names.strip);
                if (value == nullptr) {
                    Py_DECREF(found);
                    return nullptr;
                }
            }
            if (value != nullptr && PyUnicode_GET_LENGTH(value) > 0) {
                Py_DECREF(found);
                PyObject* key = PyTuple_Pack(2, g->key_name, value);
                Py_DECREF(value);
                return key;
            }
            Py_XDECREF(value);
        }
    }
    if (found == nullptr && PyErr_Occurred()) {
        return nullptr;
    }
    Py_XDECREF(found);
    return PyObject_CallOneArg(g->key_slow, environ);
}

PyObject* headers_of(GateObject* g, std::int64_t remaining) {
    const std::int64_t reset = g->period < 0 ? -1 : (remaining >= g->quota ? 0 : g->period);
    PyObject* list = PyList_New(0);
    if (list == nullptr) {
        return nullptr;
    }
    auto add = [&](PyObject* item) {
        if (item == nullptr) {
            return false;
        }
        const int r = PyList_Append(list, item);
        Py_DECREF(item);
        return r == 0;
    };
    bool ok = true;
    if (g->style != kLegacy) {
        ok = PyList_Append(list, g->policy_pair) == 0 && add(pair(g_names.ratelimit, state_text(g, remaining, reset)));
    }
    if (ok && g->style != kIetf) {
        ok = PyList_Append(list, g->limit_pair) == 0 && add(pair(g_names.remaining, decimal_text(remaining)));
        if (ok && reset >= 0) {
            ok = add(pair(g_names.reset, decimal_text(reset)));
        }
    }
    if (!ok) {
        Py_DECREF(list);
        return nullptr;
    }
    return list;
}

} // namespace permits::py_wsgi_gate
