// Generated epilogues (codegen/epilogue_source.h) on the GPU, in the test kernel
// (epilogue_test_kernel.h): D and every auxiliary output against the IR evaluated in double
// (reference/epilogue_reference.h), on fresh random inputs of each shape and element type, with
// strides that are not the dense ones, and the outputs poisoned first.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../epilogue_test_kernel.h"
#include "epilogue_tensors.h"
#include "epilogue/program.h"
#include "gpu_test.h"
#include "kernels/sm90/params.h"
#include "reference/epilogue_reference.h"
#include "reference/host_numeric.h"
#include "runtime/driver.h"

namespace gemmkit {
namespace {

constexpr int64_t kBatch = 2, kM = 37, kN = 96;

using testing::EpilogueTestTensor;
using testing::read_back;
using testing::stored;

EpilogueTestTensor make_tensor(DType type, epilogue::Shape shape, std::mt19937_64& draws, bool output) {
  return testing::make_epilogue_tensor(type, shape, kBatch, kM, kN, draws, output);
}

class EpilogueKernel : public testing::GpuTest {
 protected:
  // Runs `text` with inputs and outputs of the given types; every value of D and of each output
  // within `tolerance` (relative, plus as much absolute) of the double-precision evaluation of
  // the inputs as stored, and each output rounded to its type.
  void expect_correct(const std::string& text, const codegen::EpilogueTypes& types, double tolerance) {
    SCOPED_TRACE(text);
    const epilogue::Program program = epilogue::parse(text);
    std::mt19937_64 draws(testing::fresh_seed());
    std::vector<EpilogueTestTensor> tensors;
    for (size_t i = 0; i < program.inputs.size(); ++i) {
      tensors.push_back(make_tensor(types.inputs[i], program.inputs[i].shape, draws, false));
    }
    std::vector<testing::ExpectedReduction> expected;  // a store's, where it reduces
    for (size_t k = 0; k < types.stores.size(); ++k) {
      const epilogue::Store& store = program.stores[k];
      tensors.push_back(make_tensor(types.stores[k], store.shape, draws, true));
      expected.emplace_back(tensors.back(), store.reduce == epilogue::Reduce::sum);
      // The test kernel adds into a reduction's output as it stands (the library zeroes it).
      if (store.reduce != epilogue::Reduce::none) ASSERT_EQ(cudaMemset(tensors.back().data, 0, size_t(tensors.back().elements) * 4), cudaSuccess);
    }
    EpilogueParams params{};
    for (size_t i = 0; i < tensors.size(); ++i) {
      params.tensors[i] = {tensors[i].data, tensors[i].batch_stride, tensors[i].row_stride, tensors[i].col_stride};
    }
    float* d = nullptr;
    const int64_t ld = kN + 1;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), size_t(kBatch * kM * ld) * 4), cudaSuccess);
    ASSERT_EQ(cudaMemset(d, 0xff, size_t(kBatch * kM * ld) * 4), cudaSuccess);  // NaN
    const runtime::LoadedKernel& kernel =
        runtime::load_kernel(0, testing::epilogue_test_source(program, types), testing::kEpilogueTestEntry, 0);
    long long ld_arg = ld;
    void* args[] = {&params, &d, &ld_arg};
    ASSERT_EQ(runtime::driver().launch_kernel(kernel.function, unsigned(kM), unsigned(kBatch), 1, unsigned(kN), 1, 1, 0,
                                              nullptr, args, nullptr),
              CUDA_SUCCESS);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    std::vector<char> d_bytes(size_t(kBatch * kM * ld) * 4);
    ASSERT_EQ(cudaMemcpy(d_bytes.data(), d, d_bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<std::vector<char>> store_bytes;
    for (size_t k = 0; k < types.stores.size(); ++k) {
      const EpilogueTestTensor& t = tensors[program.inputs.size() + k];
      store_bytes.emplace_back(size_t(t.elements * dtype_size(t.type)));
      ASSERT_EQ(cudaMemcpy(store_bytes.back().data(), t.data, store_bytes.back().size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    std::vector<double> inputs(program.inputs.size()), values(program.nodes.size());
    int64_t wrong = 0;
    for (int64_t b = 0; b < kBatch; ++b) {
      for (int64_t m = 0; m < kM; ++m) {
        for (int64_t n = 0; n < kN; ++n) {
          for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = tensors[i].values[size_t(tensors[i].offset(b, m, n))];
          reference::evaluate_epilogue(program, double(m + n), double(m - n), inputs, values);
          auto check = [&](double got, double want, const std::string& what) {
            if (std::fabs(got - want) <= tolerance * (1 + std::fabs(want))) return;
            if (++wrong <= 5) ADD_FAILURE() << what << " at (" << b << ", " << m << ", " << n << "): " << got << ", expected " << want;
          };
          check(read_back(d_bytes, DType::f32, (b * kM + m) * ld + n), values[size_t(program.result)], "D");
          for (size_t k = 0; k < types.stores.size(); ++k) {
            const EpilogueTestTensor& t = tensors[program.inputs.size() + k];
            const double value = values[size_t(program.stores[k].node)];
            if (program.stores[k].reduce != epilogue::Reduce::none) {
              expected[k].add(t.offset(b, m, n), value, tolerance * (1 + std::fabs(value)));
            } else {
              check(read_back(store_bytes[k], t.type, t.offset(b, m, n)), stored(t.type, value), program.stores[k].name);
            }
          }
        }
      }
    }
    for (size_t k = 0; k < types.stores.size(); ++k) {
      if (program.stores[k].reduce != epilogue::Reduce::none) wrong += expected[k].check(store_bytes[k], program.stores[k].name);
    }
    EXPECT_EQ(wrong, 0);
    // The outputs' padding (matrix rows are N + 3 apart) is never written.
    for (size_t k = 0; k < types.stores.size(); ++k) {
      const EpilogueTestTensor& t = tensors[program.inputs.size() + k];
      if (program.stores[k].reduce != epilogue::Reduce::none) continue;
      for (int64_t b = 0; b < kBatch; ++b) {
        for (int64_t m = 0; m < kM; ++m) {
          for (int64_t n = kN; n < kN + 3; ++n) EXPECT_TRUE(std::isnan(read_back(store_bytes[k], t.type, t.offset(b, m, n))));
        }
      }
    }
    cudaFree(d);
    for (EpilogueTestTensor& t : tensors) t.free();
  }
};

TEST_F(EpilogueKernel, TensorsOfEveryShapeAndType) {
  using DType::bf16, DType::f16, DType::f32;
  expect_correct("acc", {}, 0);
  expect_correct("acc * scale[m] + bias[n]", {{f32, bf16}, {}}, 1e-6);
  expect_correct("(acc + bias[n]) * gate[m, n] - residual[m, n] / 4", {{f16, bf16, f32}, {}}, 1e-6);
}

TEST_F(EpilogueKernel, EveryOperation) {
  const double f32_math = 1e-5;  // f32 arithmetic, the library's erff, expf, tanhf, logf, rsqrtf, and __expf
  for (const char* op : {"identity", "relu", "relu2", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "erf", "abs",
                         "neg", "square", "dgelu", "dgelu_tanh", "dsilu", "drelu", "dsigmoid", "dtanh"}) {
    expect_correct(std::string(op) + "(acc / 40 - x[m, n])", {{DType::f32}, {}}, f32_math);
  }
  expect_correct("exp(x[m, n]) + log(abs(x[m, n]) + 0.5) + sqrt(abs(x[m, n])) + rsqrt(abs(x[m, n]) + 0.25)",
                 {{DType::f32}, {}}, f32_math);
  expect_correct("clamp(acc / 20 - x[m, n], -1.5, 2) + max(acc / 64, x[m, n]) * min(x[m, n], 0.5)",
                 {{DType::f32}, {}}, f32_math);
}

TEST_F(EpilogueKernel, CastsAndAuxiliaryOutputs) {
  using DType::bf16, DType::f16, DType::f32;
  // A cast rounds f32 arithmetic's result, which may lie an ulp from the double's: within one
  // unit of the cast's type.
  expect_correct("bf16(acc / 7 + x[n])", {{f32}, {}}, 1.0 / 128);
  expect_correct("f16(acc / 7 + x[n]) * f32(acc)", {{f32}, {}}, 1.0 / 1024);
  expect_correct("h = acc / 16 + bias[n]; pre[m, n] = h; sq[m, n] = square(h); gelu(h)", {{bf16}, {bf16, f32}},
                 1.0 / 128);
}

// A dual GEMM's epilogue: acc2 (m - n in the test kernel) apart from acc (m + n), alone and in
// SwiGLU's forms, with a store of a value that reads both.
TEST_F(EpilogueKernel, SecondProduct) {
  const double f32_math = 1e-5;
  expect_correct("acc2", {}, 0);
  expect_correct("silu(acc / 40) * (acc2 / 40)", {}, f32_math);
  expect_correct("h = min(acc / 40, 7); h * sigmoid(1.702 * h) * (clamp(acc2 / 40, -7, 7) + 1)", {}, f32_math);
  expect_correct("g[m, n] = acc2 - acc; silu(acc2 / 40 + x[n]) * acc / 40", {{DType::f32}, {DType::f32}}, f32_math);
}

// Reductions, each element's value added by the test kernel: sums and maxima of |x| along each
// index and over a batch, of values that read a scalar tensor, and a backward epilogue's form
// (the gradient times an activation's slope at a saved pre-activation, summed down the columns:
// the bias gradient).
TEST_F(EpilogueKernel, Reductions) {
  using DType::bf16, DType::f32;
  expect_correct("h = acc / 40 - x[m, n]; s[n] = sum(h); a[m] = amax(h); t[] = amax(h * k[]); r[m] = sum(h); "
                 "c[n] = amax(h); w[] = sum(h); silu(h)",
                 {{bf16, f32}, {f32, f32, f32, f32, f32, f32}}, 1e-5);
  expect_correct("dh = acc / 40 * dgelu(pre[m, n]); db[n] = sum(dh); dh", {{bf16}, {f32}}, 1e-5);
}

}  // namespace
}  // namespace gemmkit
