#include "gemmkit/grouped.h"

#include "api/prepare.h"

namespace gemmkit {

void grouped_gemm(const TensorView& a, const TensorView& b, const TensorView& d, const GroupSizes& sizes,
                  const GemmOptions& options) {
  api::run_prepared(api::prepare_grouped(a, b, d, sizes, options), options.stream);
}

void grouped_gemm_wgrad(const TensorView& x, const TensorView& y, const TensorView& d, const GroupSizes& sizes,
                        const GemmOptions& options) {
  api::run_prepared(api::prepare_grouped_wgrad(x, y, d, sizes, options), options.stream);
}

}  // namespace gemmkit
