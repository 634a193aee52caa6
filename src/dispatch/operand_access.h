// Operand access: whether TMA can read each operand and store D as they lie in memory, and where
// it cannot, how the kernel reads them instead (staged copies, realigning, row classes). Together
// they give the facts of a problem's config (problem_config), which the cost model then tiles.
#pragma once

#include <cstdint>

#include "core/kernel_config.h"
#include "core/problem.h"

namespace gemmkit {

// Whether TMA can read an operand of rows x cols, and along which dimension it is contiguous.
struct TmaAccess {
  bool ok = false;
  bool cols_contiguous = false;  // else rows are
};
TmaAccess tma_access(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols);

// Whether TMA can write D: aligned, rows (or, where those are contiguous, columns) a whole number
// of 16-byte pieces.
bool tma_can_store(const Problem& p);

// The config of a (normalised, see plan.h) problem as far as the problem alone decides it: its
// facts (types, scales, majorness, batching, staging and the store path) and its kind, gemv for
// M = 1 with B's K contiguous, fallback where the TMA kernel cannot run (even after staging),
// else tma. The knobs of a tma config are the cost model's or tuning's to choose.
KernelConfig problem_config(const Problem& p);

// Grouped problems (core/problem.h, GroupRef): whether the grouped kernel can read A and B, as
// they lie or staged (TMA-addressable; FP8 A K-major, FP8 B any, staged K-major where not; along
// K, 16-bit with A's M contiguous, or FP8, both staged; a dual GEMM's B2 read by TMA as B is);
// and the facts of the config, which problem_config returns for them (the grouped kernel stores D
// directly where TMA cannot).
bool grouped_operands_readable(const Problem& p);
KernelConfig grouped_problem_config(const Problem& p);

// The fallback kernel's config for a problem whose config has the facts `f`: its types, scales
// and C.
KernelConfig fallback_config(const KernelFacts& f);

// Whether the problem's A is read as row classes (KernelConfig::row_classes).
bool row_classes_apply(const Problem& p);

// A row-classes config turned into the realigning kernel's for the same problem: for a launch
// that cannot have B's copies (a graph capture, which cannot grow the scratch).
KernelConfig realigned_instead(const Problem& p, KernelConfig c);

}  // namespace gemmkit
