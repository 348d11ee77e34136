// permits._core.Tally: a Python limiter's counts of granted and refused leases, safe to add to
// from many threads at once (tally_type.cpp).
#pragma once

#include <Python.h>

namespace permits::py_tally {

/// Adds the type to the module `m`; false with a Python error set.
bool register_type(PyObject* m);

} // namespace permits::py_tally
