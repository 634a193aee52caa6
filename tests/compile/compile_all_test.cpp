// Every kernel configuration compiles with NVRTC for sm_90a, and ptxas reports no spills and
// no stack frame. Needs no GPU. The configurations are compile_cases.h's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codegen/kernel_source.h"
#include "dispatch/cost_model.h"
#include "dispatch/operand_access.h"
#include "clean_compile.h"
#include "compile_cases.h"

namespace gemmkit {
namespace {

using testing::CompileCase;
using testing::expect_clean_compile;

void expect_clean_compiles(const std::vector<CompileCase>& cases) {
  for (const CompileCase& c : cases) {
    expect_clean_compile(codegen::gemm_source(c.config), codegen::gemm_kernel_name(c.config), c.what);
  }
}

class TmaKernelCompiles : public ::testing::TestWithParam<CompileCase> {};

TEST_P(TmaKernelCompiles, WithoutSpills) {
  const CompileCase& c = GetParam();
  expect_clean_compile(codegen::gemm_source(c.config), codegen::kGemmKernel, c.what);
}

std::string tile_case_name(const ::testing::TestParamInfo<CompileCase>& info) {
  const KernelConfig& c = info.param.config;
  return std::to_string(c.tile_m) + "x" + std::to_string(c.tile_n) + "_" + (c.a_k_major ? "K" : "M") +
         (c.b_k_major ? "K" : "N") + "_cluster" + std::to_string(c.cluster_m) + (c.splits > 1 ? "_splitK" : "");
}

INSTANTIATE_TEST_SUITE_P(AllTiles, TmaKernelCompiles, ::testing::ValuesIn(testing::tile_cases()), tile_case_name);

TEST(TmaKernelVariants, EveryTileWithCCompilesWithoutSpills) { expect_clean_compiles(testing::c_cases()); }

TEST(TmaKernelVariants, ColumnStoresCompileWithoutSpills) { expect_clean_compiles(testing::column_store_cases()); }

TEST(TmaKernelVariants, SplitKWithEveryEpilogueCompilesWithoutSpills) {
  expect_clean_compiles(testing::split_k_cases());
}

TEST(TmaKernelVariants, RealignedOperandsCompileWithoutSpills) { expect_clean_compiles(testing::realign_cases()); }

TEST(TmaKernelVariants, RowClassesCompileWithoutSpills) { expect_clean_compiles(testing::row_class_cases()); }

TEST(TmaKernelVariants, CompileWithoutSpills) { expect_clean_compiles(testing::type_cases()); }

TEST(TmaKernelVariants, EightBitTilesCompileWithoutSpillsInEveryMode) {
  expect_clean_compiles(testing::eight_bit_cases());
}

TEST(SimtKernels, FallbackAndGemvCompileForEveryTypeCombination) { expect_clean_compiles(testing::simt_cases()); }

// NVRTC's own cache would hand back a program compiled before without ptxas' report.
TEST(TmaKernelVariants, CompilingTwiceReportsBothTimes) {
  KernelConfig config;
  config.stages = max_stages(config, DeviceLimits{}.smem_per_block);
  for (int time = 0; time < 2; ++time) {
    expect_clean_compile(codegen::gemm_source(config), codegen::kGemmKernel, config.name() + ", time " + std::to_string(time));
  }
}

TEST(ReferenceKernel, Compiles) {
  expect_clean_compile(codegen::reference_source({.has_c = true}), codegen::kReferenceKernel,
                       "reference");
}

}  // namespace
}  // namespace gemmkit
