// The library's version, and the source it was built from.
#pragma once

namespace gemmkit {

// The release, e.g. "0.1.0" (the CMake project's and the Python package's version).
const char* version();

// The git commit the library was built from, short form, "+dirty" appended where the tree had
// uncommitted changes; "" where the source was not a git checkout.
const char* git_commit();

}  // namespace gemmkit
