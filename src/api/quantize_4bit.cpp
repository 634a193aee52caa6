#include "api/quantize_4bit.h"

#include <algorithm>
#include <sstream>
#include <utility>
#include <vector>

#include "api/device_checks.h"
#include "api/tensor_checks.h"
#include "codegen/kernel_source.h"
#include "core/checked_math.h"
#include "gemmkit/error.h"
#include "gemmkit/quantize.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"

namespace gemmkit {
namespace {

using namespace api;  // the argument checks of api/tensor_checks.h

// ---- argument checks --------------------------------------------------------------------------

std::string name_of(DType t) { return std::string(dtype_name(t)); }

// The checks both quantisers share. `format` is u4 (scales bf16 or f16, zero points optional)
// or e2m1 (ue8m0 scales, group 32).
Quantize4bitProblem validate_4bit(const TensorView& w, const TensorView& q, const TensorView& scales,
                                  const std::optional<TensorView>& zeros, int64_t group, DType format) {
  check_form(w, "w");
  check_form(q, "q");
  check_form(scales, "scales");
  if (zeros) check_form(*zeros, "zeros");
  const bool u4 = format == DType::u4;
  if (w.dtype != DType::bf16 && w.dtype != DType::f16 && w.dtype != DType::f32) {
    fail("w: dtype " + name_of(w.dtype) + " is not supported; expected bf16, f16 or f32");
  }
  if (q.dtype != format) {
    fail("q: dtype " + name_of(q.dtype) + "; expected " + name_of(format) +
         (u4 ? " (int4 codes, two a byte)" : " (MXFP4 values, two a byte)"));
  }
  if (u4 ? scales.dtype != DType::bf16 && scales.dtype != DType::f16 : scales.dtype != DType::ue8m0) {
    fail("scales: dtype " + name_of(scales.dtype) + "; expected " +
         (u4 ? "bf16 or f16 (gemm() takes u4 scales of A's dtype)" : "ue8m0 (MX scales)"));
  }
  if (zeros && zeros->dtype != scales.dtype) {
    fail("zeros: dtype " + name_of(zeros->dtype) + "; expected the scales', " + name_of(scales.dtype));
  }

  const int64_t k = w.rows(), n = w.cols(), batch = w.batch();
  if (u4) {
    if (group < 1) fail("group: " + std::to_string(group) + "; expected a group of at least 1 element of K");
    if (group % 2 != 0 && group < k) {
      fail("group: " + std::to_string(group) + " with K = " + std::to_string(k) +
           "; expected an even group (two codes share a byte), or one of at least K (one group a column)");
    }
  }
  if (q.rows() != k || q.cols() != n) {
    fail("q: shape " + shape_text(q) + "; expected w's K x N = " + std::to_string(k) + " x " + std::to_string(n));
  }
  if (q.batch() != batch) {
    fail("q: batch " + std::to_string(q.batch()) + "; expected w's batch " + std::to_string(batch));
  }
  const int64_t groups = ceil_div(k, group);
  const std::string blocks_text = u4 ? "ceil(K/" + std::to_string(group) + ") x N" : "ceil(K/32) x N";
  auto check_scale_shape = [&](const TensorView& t, const char* name) {
    if (t.rows() != groups || t.cols() != n) {
      fail(std::string(name) + ": shape " + shape_text(t) + "; expected " + blocks_text + " = " +
           std::to_string(groups) + " x " + std::to_string(n));
    }
    if (t.batch() != batch) {
      fail(std::string(name) + ": batch " + std::to_string(t.batch()) + "; expected w's batch " +
           std::to_string(batch));
    }
  };
  check_scale_shape(scales, "scales");
  if (zeros) check_scale_shape(*zeros, "zeros");
  // Two codes a byte along K: K contiguous, and every column (and batch) from a byte.
  if (k > 1 && q.row_stride() != 1) {
    fail("q: strides " + strides_text(q) + " for 4-bit values of shape " + shape_text(q) +
         "; expected K contiguous (row stride 1: [N, ceil(K/2)] bytes are q with strides {1, 2 ceil(K/2)})");
  }
  if ((n > 1 && q.col_stride() % 2 != 0) || (q.rank == 3 && q.batch() > 1 && q.batch_stride() % 2 != 0)) {
    fail("q: strides " + strides_text(q) +
         " for 4-bit values; expected even column and batch strides (two elements a byte, each column from a byte)");
  }

  Quantize4bitProblem problem;
  problem.w = w;
  problem.q = q;
  problem.scales = scales;
  problem.zeros = zeros;
  problem.group = group;
  problem.empty = element_count(w) == 0;
  if (problem.empty) return problem;

  std::vector<std::pair<const TensorView*, const char*>> views = {{&w, "w"}, {&q, "q"}, {&scales, "scales"}};
  if (zeros) views.emplace_back(&*zeros, "zeros");
  for (auto [t, name] : views) {
    if (t->data == nullptr) fail(std::string(name) + ": data is null; expected a device pointer");
    const int bytes = is_4bit(t->dtype) ? 1 : dtype_size(t->dtype);
    if (reinterpret_cast<uintptr_t>(t->data) % uintptr_t(bytes) != 0) {
      fail(std::string(name) + ": data is not " + std::to_string(bytes) + "-byte aligned; expected " +
           name_of(t->dtype) + " elements at a multiple of " + std::to_string(bytes) + " bytes");
    }
  }
  // The outputs: each element its own address, apart from w and from each other.
  std::vector<std::pair<ByteRange, const char*>> ranges = {{byte_range(w, w.batch(), "w"), "w"}};
  for (size_t i = 1; i < views.size(); ++i) {
    const auto [t, name] = views[i];
    check_no_self_overlap(*t, t->batch(), name);
    const ByteRange range = byte_range(*t, t->batch(), name);
    for (const auto& [other, other_name] : ranges) {
      if (range.overlaps(other)) {
        fail(std::string(name) + ": memory overlaps " + other_name + "; expected " + name + " apart from " +
             other_name);
      }
    }
    ranges.emplace_back(range, name);
  }
  return problem;
}

// ---- launch -----------------------------------------------------------------------------------

// The loaded kernel for one variant, looked up without hashing its source again.
const runtime::LoadedKernel& quantize_4bit_kernel(int device, const Quantize4bitVariant& variant) {
  return runtime::loaded_once(device, variant,
                              [&] { return runtime::KernelSpec{quantize_4bit_source(variant), kQuantize4bitKernel, 0}; });
}

void run_quantize_4bit(const Quantize4bitProblem& problem, cudaStream_t stream) {
  if (problem.empty) return;
  std::vector<api::Operand> operands = {{&problem.w, problem.w.batch(), "w"},
                                        {&problem.q, problem.q.batch(), "q"},
                                        {&problem.scales, problem.scales.batch(), "scales"}};
  if (problem.zeros) operands.push_back({&*problem.zeros, problem.zeros->batch(), "zeros"});
  const int device = api::check_device_memory(operands);
  runtime::DeviceGuard guard(device);
  const runtime::DeviceInfo& info = runtime::device_info(device);
  runtime::require_sm90(info);
  const Quantize4bitLaunch launch = plan_quantize_4bit(problem, info.sm_count);
  const runtime::LoadedKernel& kernel = quantize_4bit_kernel(device, quantize_4bit_variant(problem));
  Quantize4bitParams params = launch.params;
  void* args[] = {&params};
  runtime::check(runtime::driver().launch_kernel(kernel.function, launch.grid, 1, 1, GEMMKIT_QUANTIZE_4BIT_THREADS, 1,
                                                 1, 0, stream, args, nullptr),
                 "cuLaunchKernel(quantize_4bit)");
}

}  // namespace

Quantize4bitProblem validate_quantize_int4(const TensorView& w, const TensorView& q, const TensorView& scales,
                                           const std::optional<TensorView>& zeros, int64_t group,
                                           const QuantizeOptions& options) {
  if (options.power_of_two_scales) {
    fail("options.power_of_two_scales: true; expected false (int4 scales are 2 amax / 15, or (max - min) / 15 with "
         "zero points, rounded to the scales' type, not powers of two)");
  }
  return validate_4bit(w, q, scales, zeros, group, DType::u4);
}

Quantize4bitProblem validate_quantize_mxfp4(const TensorView& w, const TensorView& q, const TensorView& scales,
                                            const QuantizeOptions&) {
  return validate_4bit(w, q, scales, std::nullopt, 32, DType::e2m1);
}

Quantize4bitLaunch plan_quantize_4bit(const Quantize4bitProblem& problem, int sm_count) {
  auto operand = [](const TensorView& t) {
    return Quantize4bitOperand{t.data, t.rank == 3 ? t.batch_stride() : 0, t.row_stride(), t.col_stride()};
  };
  Quantize4bitParams p{};
  p.w = operand(problem.w);
  p.q = operand(problem.q);
  p.scales = operand(problem.scales);
  if (problem.zeros) p.zeros = operand(*problem.zeros);
  p.batch = problem.w.batch();
  p.k = problem.w.rows();
  p.n = problem.w.cols();
  p.group = std::min<int64_t>(problem.group, p.k);
  p.groups = ceil_div(p.k, p.group);
  const std::optional<int64_t> blocks = checked_product({p.batch, p.n, p.groups});
  if (!blocks) {
    fail("w: " + std::to_string(p.batch) + " x " + std::to_string(p.k) + " x " + std::to_string(p.n) +
         " is too large to quantise in one call; expected fewer than 2^63 blocks");
  }
  p.blocks = *blocks;
  constexpr int64_t kWarps = GEMMKIT_QUANTIZE_4BIT_THREADS / 32;
  // One warp a block; enough CTAs to fill every SM (16 of 128 threads each), each warp looping
  // over further blocks where there are more.
  Quantize4bitLaunch launch;
  launch.params = p;
  launch.grid = unsigned(std::clamp<int64_t>(ceil_div(p.blocks, kWarps), 1, int64_t(std::max(sm_count, 1)) * 16));
  return launch;
}

std::string quantize_4bit_source(const Quantize4bitVariant& v) {
  std::ostringstream config;  // the kernel's kernel_config.cuh
  config << "#include \"utility.cuh\"\n\nnamespace gemmkit::sm90 {\n\n"
         << "constexpr int kQ4WType = " << codegen::type_code(v.w) << ";\n"
         << "constexpr int kQ4Format = " << codegen::type_code(v.q) << ";\n"
         << "constexpr int kQ4ScaleType = " << codegen::type_code(v.scales) << ";\n"
         << "constexpr bool kQ4Zeros = " << (v.zeros ? "true" : "false") << ";\n\n"
         << "}  // namespace gemmkit::sm90\n";
  return "// gemmkit quantize_4bit kernel\n" +
         codegen::expand_includes("#include \"quantize_4bit.cuh\"\n", config.str());
}

Quantize4bitVariant quantize_4bit_variant(const Quantize4bitProblem& problem) {
  return {problem.w.dtype, problem.q.dtype, problem.scales.dtype, problem.zeros.has_value()};
}

void quantize_int4(const TensorView& w, const TensorView& q, const TensorView& scales,
                   const std::optional<TensorView>& zeros, int64_t group, const QuantizeOptions& options) {
  run_quantize_4bit(validate_quantize_int4(w, q, scales, zeros, group, options), options.stream);
}

void quantize_mxfp4(const TensorView& w, const TensorView& q, const TensorView& scales,
                    const QuantizeOptions& options) {
  run_quantize_4bit(validate_quantize_mxfp4(w, q, scales, options), options.stream);
}

}  // namespace gemmkit
