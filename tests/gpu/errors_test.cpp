// Pointers that need a live device to judge: host memory and tensors on different devices are
// rejected, managed memory is accepted.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "gemmkit/error.h"
#include "gpu_test.h"

namespace gemmkit {
namespace {

using GemmDeviceErrors = testing::GpuTest;

// Expects gemm to throw invalid_argument with a message containing `needle`.
void expect_rejected(const TensorView& a, const TensorView& b, const TensorView& d, const std::string& needle) {
  try {
    gemm(a, b, d);
    FAIL() << "gemm accepted the arguments; expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST_F(GemmDeviceErrors, HostPointersAreRejected) {
  reference::DeviceProblem problem({.m = 64, .n = 64, .k = 64}, testing::fresh_seed());
  std::vector<uint16_t> host(64 * 64);
  TensorView host_view = TensorView::row_major(host.data(), DType::bf16, 64, 64);
  expect_rejected(host_view, problem.b(), problem.d(), "A: ");
  expect_rejected(problem.a(), host_view, problem.d(), "B: ");

  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 64 * 64 * 2), cudaSuccess);
  expect_rejected(problem.a(), problem.b(), TensorView::row_major(pinned, DType::bf16, 64, 64), "D: pointer");
  cudaFreeHost(pinned);
}

// A view that runs past the end of its allocation is reported as such, before any check of
// overlaps between operands (two such views may seem to overlap).
TEST_F(GemmDeviceErrors, ViewsPastTheirAllocationAreRejected) {
  reference::DeviceProblem problem({.m = 64, .n = 64, .k = 64}, testing::fresh_seed());
  const int64_t huge = int64_t(1) << 40;
  const TensorView a = problem.a(), b = problem.b(), d = problem.d();
  const TensorView tall_a = TensorView::row_major(a.data, DType::bf16, huge, 64);
  const TensorView tall_d = TensorView::row_major(d.data, DType::bf16, huge, 64);
  expect_rejected(tall_a, b, tall_d, "D: sizes [1099511627776, 64]");
  expect_rejected(tall_a, b, tall_d, "past the end of its allocation");
  expect_rejected(tall_a, b, d, "D: shape");  // shapes are checked first
  const TensorView strided_b = TensorView::matrix(b.data, DType::bf16, 64, 64, int64_t(1) << 30, 1);
  expect_rejected(a, strided_b, d, "B: sizes [64, 64] with strides {1073741824, 1} span");
}

// Managed memory is device-accessible: accepted, and the result is the same as in device memory.
// Written by the host first (poisoned with NaNs), so that its pages lie there and it may read as
// host memory to the pointer query.
TEST_F(GemmDeviceErrors, ManagedMemoryIsAccepted) {
  reference::DeviceProblem problem({.m = 64, .n = 64, .k = 64}, testing::fresh_seed());
  void* managed = nullptr;
  ASSERT_EQ(cudaMallocManaged(&managed, 64 * 64 * 2), cudaSuccess);
  std::memset(managed, 0xff, 64 * 64 * 2);
  problem.prepare_output(nullptr);
  gemm(problem.a(), problem.b(), problem.d(), problem.options(nullptr));
  EXPECT_NO_THROW(gemm(problem.a(), problem.b(), TensorView::row_major(managed, DType::bf16, 64, 64)));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<char> expected = problem.copy_output();
  EXPECT_EQ(std::memcmp(expected.data(), managed, expected.size()), 0);
  cudaFree(managed);
}

TEST_F(GemmDeviceErrors, TensorsOnDifferentDevicesAreRejected) {
  if (runtime::device_count() < 2) GTEST_SKIP() << "one device: nothing to mix";
  reference::DeviceProblem on_zero({.m = 64, .n = 64, .k = 64}, testing::fresh_seed());
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  {
    reference::DeviceProblem on_one({.m = 64, .n = 64, .k = 64}, testing::fresh_seed());
    expect_rejected(on_zero.a(), on_one.b(), on_one.d(), "A: on device 0 but D is on device 1");
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

}  // namespace
}  // namespace gemmkit
