#include "dispatch/problem.h"

namespace gemmkit {

std::string layout_name(const Problem& p) {
  std::string name;
  name += p.a.col_stride == 1 ? 'N' : p.a.row_stride == 1 ? 'T' : 'S';
  name += p.b.col_stride == 1 ? 'N' : p.b.row_stride == 1 ? 'T' : 'S';
  return name;
}

}  // namespace gemmkit
