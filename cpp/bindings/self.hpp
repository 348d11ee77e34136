// The C++ object behind `self` in a bound method. An instance made by Class.__new__(Class) never
// ran __init__: pybind11 would hand the method a null object (a crash) or fail a holder cast with a
// RuntimeError; every method and property of the bindings reads `self` through these instead.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

namespace permits::bind {

namespace py = pybind11;

inline void require_initialized(py::handle self) {
    if (!py::detail::is_holder_constructed(self.ptr())) {
        throw py::type_error(std::string(Py_TYPE(self.ptr())->tp_name) +
                             " object is not initialized: its __init__ was not called");
    }
}

/// `self` as a T; TypeError if its __init__ never ran.
template <class T> T& self_of(py::handle self) {
    require_initialized(self);
    return py::cast<T&>(self);
}

/// `self`'s shared_ptr holder, for methods that hand the object on (leases, wait handles).
template <class T> std::shared_ptr<T> shared_self_of(py::handle self) {
    require_initialized(self);
    return py::cast<std::shared_ptr<T>>(self);
}

} // namespace permits::bind
