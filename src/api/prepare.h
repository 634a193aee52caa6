// The steps gemm() takes before it plans, in one place, so that the tools prepare a problem
// exactly as gemm() runs it.
#pragma once

#include "core/problem.h"
#include "gemmkit/gemm.h"
#include "gemmkit/grouped.h"

namespace gemmkit::api {

struct PreparedGemm {
  Problem problem;     // normalised (dispatch/plan.h: normalize); as validated where empty
  bool empty = false;  // M, N or batch is 0: there is nothing to run
};

// The device of the memory the operands point into: what gemm() runs on.
inline constexpr int kOperandsDevice = -1;

// validate_gemm; then, unless the problem is empty, its device, check_apart and normalize.
// With kOperandsDevice (gemm()), the device is the one the operands' memory is on, each view
// checked to lie inside its allocation; `device` >= 0 is taken as given, with no look at the
// memory (the tools' stand-in problems, whose pointers are not allocations). Throws
// Error(invalid_argument) as gemm() does. Touches nothing on the device: the caller makes
// problem.device current before planning.
PreparedGemm prepare_gemm(const TensorView& a, const TensorView& b, const TensorView& d, const GemmOptions& options,
                          int device = kOperandsDevice);

// Plans and runs a prepared problem on its device (nothing where it is empty): the step every
// entry point ends with.
void run_prepared(const PreparedGemm& prepared, cudaStream_t stream);

// The same for grouped_gemm (gemmkit/grouped.h): its checks, then the device and check_apart.
// Empty where M_total (masked: max_m) or N is 0.
PreparedGemm prepare_grouped(const TensorView& a, const TensorView& b, const TensorView& d, const GroupSizes& sizes,
                             const GemmOptions& options, int device = kOperandsDevice);

// The same for grouped_gemm_wgrad: the problem D_g = A B_g... as the kernel takes it, A = x^T
// (P x M_total) and B = y (M_total x Q) shared, K = M_total split among the groups, D = d [G, P, Q].
// Empty where P, Q or G is 0.
PreparedGemm prepare_grouped_wgrad(const TensorView& x, const TensorView& y, const TensorView& d,
                                   const GroupSizes& sizes, const GemmOptions& options,
                                   int device = kOperandsDevice);

}  // namespace gemmkit::api
