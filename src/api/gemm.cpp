#include "gemmkit/gemm.h"

#include <string>

#include "api/prepare.h"

namespace gemmkit {

std::string_view scale_mode_name(ScaleMode mode) {
  switch (mode) {
    case ScaleMode::none: return "none";
    case ScaleMode::tensor: return "tensor";
    case ScaleMode::rowwise: return "rowwise";
    case ScaleMode::block: return "block";
    case ScaleMode::mx: return "mx";
    case ScaleMode::group: return "group";
  }
  return "unknown";
}

void gemm(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options) {
  api::run_prepared(api::prepare_gemm(a, b, d, options), options.stream);
}

}  // namespace gemmkit
