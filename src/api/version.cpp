#include "gemmkit/version.h"

#if !defined(GEMMKIT_VERSION) || !defined(GEMMKIT_GIT_COMMIT)
#error "GEMMKIT_VERSION and GEMMKIT_GIT_COMMIT must be defined by the build"
#endif

namespace gemmkit {

const char* version() { return GEMMKIT_VERSION; }

const char* git_commit() { return GEMMKIT_GIT_COMMIT; }

}  // namespace gemmkit
