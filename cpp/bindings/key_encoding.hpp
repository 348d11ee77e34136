// Python partition keys as engine keys: bytes tagged with their type, so "7" and 7 differ.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <string>

namespace permits::bind {

/// Appends the key's encoding to `out`; false with a Python error set for a key of another type
/// (str, bytes, int or tuples of them, nested at most 16 deep).
bool encode_key(PyObject* key, std::string& out, int depth = 0);
/// The key's encoding; throws pybind11::error_already_set for a bad key.
std::string key_of(pybind11::handle resource);

} // namespace permits::bind
