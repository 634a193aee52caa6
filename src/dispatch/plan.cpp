#include "dispatch/plan.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "codegen/kernel_source.h"
#include "core/checked_math.h"
#include "gemmkit/error.h"
#include "gemmkit/quantize.h"
#include "runtime/device.h"
#include "runtime/driver.h"
#include "runtime/kernel_cache.h"
#include "runtime/launch.h"
#include "runtime/utility_kernels.h"
#include "runtime/words_hash.h"
#include "tuning/tuned_configs.h"

namespace gemmkit {
namespace {

// Everything of a normalised problem that choose_config reads: equal keys, equal plans. Of the
// pointers only their 16-byte alignment matters.
// Scales enter by their modes and blocks, 4-bit weights' also by their dtype (W4A8 takes bf16 or
// f16): the kernels read their strides at run time; a fused epilogue by its code (interned: one
// pointer per code), its tensors likewise.
using PlanKey = std::array<int64_t, 28>;

PlanKey plan_key(const Problem& p) {
  auto alignment = [](const void* data) { return int64_t(reinterpret_cast<uintptr_t>(data) % 16); };
  const int64_t types = int64_t(p.a.dtype) | int64_t(p.b.dtype) << 4 | int64_t(p.d.dtype) << 8 |
                        int64_t(p.c.dtype) << 12 | int64_t(p.has_c()) << 16 | int64_t(p.scale_a.mode) << 20 |
                        int64_t(p.scale_b.mode) << 24 | int64_t(p.device) << 28;
  return {types,          p.m,          p.n,           p.k,           p.batch,          alignment(p.a.data),
          p.a.batch_stride, p.a.row_stride, p.a.col_stride, alignment(p.b.data), p.b.batch_stride, p.b.row_stride,
          p.b.col_stride, alignment(p.d.data), p.d.batch_stride, p.d.row_stride, p.d.col_stride,
          p.scale_a.block_rows, p.scale_a.block_cols, p.scale_b.block_rows, p.scale_b.block_cols,
          int64_t(p.grouped()) | int64_t(p.groups.layout) << 1 | int64_t(p.groups.along_k) << 3 |
              int64_t(p.groups.along_n) << 8 |
              int64_t(p.epilogue.transposed) << 4 | int64_t(p.scale_a.zeros.data != nullptr) << 5 |
              int64_t(p.scale_b.zeros.data != nullptr) << 6 | int64_t(p.group_scale_type()) << 7,
          p.max_sms, int64_t(reinterpret_cast<uintptr_t>(p.epilogue.code)),
          p.dual() ? alignment(p.b2.data) : -1, p.b2.batch_stride, p.b2.row_stride, p.b2.col_stride};
}

// The kernel for a config on a device, generated, compiled and loaded on first use.
const runtime::LoadedKernel& kernel_for(int device, const KernelConfig& config) {
  return runtime::loaded_once(device, compiled(config), [&] {
    return runtime::KernelSpec{codegen::gemm_source(config), codegen::gemm_kernel_name(config), config.smem_bytes(),
                               config.ctas_per_sm()};
  });
}

DeviceLimits limits_of(const runtime::DeviceInfo& info) {
  return {info.sm_count, info.smem_per_block_optin, info.l2_bytes};
}

// The SMs a problem's kernel may run on: the device's, or its budget where that is fewer.
int sm_budget(const Problem& p, const runtime::DeviceInfo& info) {
  return p.max_sms > 0 ? std::min(p.max_sms, info.sm_count) : info.sm_count;
}

// Whether a config quantises an e4m3 D in its kernel: a TMA kernel whose tiles hold whole 1x128
// blocks (cost_model.h, tile_takes_epilogue), as the plan picks wherever one runs the problem.
bool quantizes_in_kernel(const KernelConfig& c) { return c.kind == KernelKind::tma && c.tile_cols(c.tile_n) % 128 == 0; }

// FP4 x FP4 in normalize's orientation: e2m1 activations B against 4-bit weights A. No kernel
// reads 4-bit B: run_plan widens it to e4m3 first (run_on_widened_activations) and plans that.
bool widens_activations(const Problem& p) { return is_4bit(p.a.dtype) && p.b.dtype == DType::e2m1; }

// Many tokens against 4-bit weights A (normalize's orientation): the widening kernels widen each
// weight again for every tile of tokens, at issue rates below the tensor cores'
// (docs/experiments.md, W4A8); a pass that widens them once into a copy (1.5 bytes a weight read
// and written for e4m3, 2.5 for bf16) runs the FP8 or 16-bit GEMM after it: exactly, for W4A8's
// u4 in groups of a multiple of 128 of K (e4m3 q - z, each group's scale a 1x128 block of A) and
// MXFP4 under bf16 activations (bf16 values). Tokens: B's columns, over every matrix that shares
// the weights. From where it paid, H200 (Llama-3-70B's 8192x8192 W4A8 in-kernel against widened:
// 1024 tokens 147 against 162 us, 2048 286 against 260; gpt-oss's MXFP4 under bf16 1.13x at 256
// tokens, 1.29-1.57x from 512).
constexpr int64_t kWidenFirstFromTokensW4a8 = 2048;
constexpr int64_t kWidenFirstFromTokensMxfp4 = 256;

bool widens_weights_first(const Problem& p) {
  if (p.grouped() || p.dual() || !is_4bit(p.a.dtype)) return false;
  const int64_t tokens = p.n * (p.batch > 1 && p.a.batch_stride == 0 ? p.batch : 1);
  if (p.a.dtype == DType::u4 && is_fp8(p.b.dtype)) {
    return p.scale_a.block_cols % 128 == 0 && p.scale_b.mode != ScaleMode::mx && tokens >= kWidenFirstFromTokensW4a8;
  }
  return p.a.dtype == DType::e2m1 && p.b.dtype == DType::bf16 && tokens >= kWidenFirstFromTokensMxfp4;
}

// The problem widens_weights_first runs: A the weights' copy at `copy` (lines of K rounded up to
// 16 elements), W4A8's with block scales at `scales` (lines contiguous, a multiple of 4 apart), or
// null pointers where only its plan is wanted. The 16-bit problem is normalised again (its D back
// in the caller's orientation); the FP8 one keeps the weights as A, whose 1x128 scales the kernel
// reads into registers before each K block's wgmma.
struct WidenedWeights {
  int64_t matrices, ld, k_blocks, scales_ld;
  size_t copy_bytes, scale_bytes;
};
WidenedWeights widened_weights(const Problem& p) {
  WidenedWeights w{};
  const bool batched = p.batch > 1 && (p.a.batch_stride != 0 || p.scale_a.m.batch_stride != 0 ||
                                       p.scale_a.zeros.batch_stride != 0);
  w.matrices = batched ? p.batch : 1;
  const int64_t bytes = p.a.dtype == DType::u4 ? 1 : 2;
  w.ld = ceil_div(p.k, 16) * 16;  // elements: the widening writes 16 codes' values at a time
  w.copy_bytes = size_t(ceil_div(w.matrices * p.m * w.ld * bytes, 256) * 256);
  if (p.a.dtype == DType::u4) {
    w.k_blocks = ceil_div(p.k, 128);
    w.scales_ld = ceil_div(p.m, 4) * 4;
    w.scale_bytes = size_t(w.matrices * w.k_blocks * w.scales_ld) * sizeof(float);
  }
  return w;
}
Problem on_widened_weights(const Problem& p, const WidenedWeights& w, void* copy, float* scales) {
  Problem q = p;
  const bool fp8 = p.a.dtype == DType::u4;
  q.a = {copy, fp8 ? DType::e4m3 : DType::bf16, w.matrices > 1 ? p.m * w.ld : 0, w.ld, 1};
  q.scale_a = {};
  if (!fp8) return normalize(q);
  // One group over all K (per channel) scales every K block alike: rowwise A, promoted by nothing,
  // where B's scales need no promotion either (the per-tensor loop's speed).
  const bool b_outer = p.scale_b.mode != ScaleMode::block && p.scale_b.mode != ScaleMode::mx;
  if (p.scale_a.block_cols >= p.k && b_outer) {
    q.scale_a.mode = ScaleMode::rowwise;
    q.scale_a.m = {scales, DType::f32, w.matrices > 1 ? w.k_blocks * w.scales_ld : 0, 1, 1};
    q.scale_a.block_cols = p.k;
    return q;
  }
  q.scale_a.mode = ScaleMode::block;
  q.scale_a.m = {scales, DType::f32, w.matrices > 1 ? w.k_blocks * w.scales_ld : 0, 1, w.scales_ld};
  q.scale_a.block_cols = 128;
  return q;
}

Plan new_plan(const Problem& normalized, const KernelConfig* forced, cudaStream_t stream) {
  const runtime::DeviceInfo& info = runtime::device_info(normalized.device);
  runtime::require_sm90(info);
  Plan plan;
  plan.sm_count = sm_budget(normalized, info);
  if (widens_activations(normalized)) return plan;
  if (!forced && widens_weights_first(normalized)) {  // the plan of the GEMM on the copy, for its description
    Plan widened = make_plan(on_widened_weights(normalized, widened_weights(normalized), nullptr, nullptr), nullptr,
                             stream);
    widened.widens_weights_first = true;
    return widened;
  }
  DeviceLimits limits = limits_of(info);
  if (normalized.grouped()) limits.sm_count = std::max(plan.sm_count, 2);  // the model weighs clusters of two
  if (forced) {
    plan.config = *forced;
  } else if (normalized.grouped()) {  // the cost model's pick: the group sizes are on the device
    plan.config = choose_grouped_config(normalized, limits);
  } else {
    plan.transposed = transposing_pays(normalized, limits);
    const tuning::Dispatch choice =
        tuning::dispatch_config(plan.transposed ? transposed_problem(normalized) : normalized, info, stream,
                                prepare_candidate);
    plan.config = choice.config;
    plan.tuned = choice.tuned;
  }
  if (plan.config.cluster_m > plan.sm_count) plan.config.cluster_m = 1;  // a budget of one SM
  // An e4m3 D no kernel of this config quantises runs through f32 values (run_then_quantize).
  if (normalized.quantizes_d() && !quantizes_in_kernel(plan.config)) return plan;
  plan.kernel = &kernel_for(normalized.device, plan.config);
  // A fused epilogue may not fit in the registers its tile leaves beside the accumulators
  // (tile_takes_epilogue, cost_model.h): where the kernel spills, the plan sets it aside for the
  // cost model's pick among narrower tiles, until one does not (or none is narrower).
  while (!forced && (plan.config.epilogue || normalized.quantizes_d()) && plan.config.kind == KernelKind::tma &&
         plan.kernel->local_bytes > 0) {
    const int widest = plan.config.tile_n - 16;
    KernelConfig narrower = normalized.grouped()
                                ? choose_grouped_config(normalized, limits, widest)
                                : choose_config(plan.transposed ? transposed_problem(normalized) : normalized, limits,
                                                widest);
    if (narrower.kind != KernelKind::tma || narrower.tile_n > widest ||
        !tile_takes_epilogue({narrower.tile_m, narrower.tile_n}, narrower)) {
      break;
    }
    if (narrower.cluster_m > plan.sm_count) narrower.cluster_m = 1;
    runtime::set_aside_kernel(*plan.kernel);
    plan.config = narrower;
    plan.tuned = false;
    plan.kernel = &kernel_for(normalized.device, plan.config);
  }
  return plan;
}

// Decode for narrow tiles (plan.h). One row goes to the GEMV kernel instead where B, aligned, has
// more than kGemvFromN columns: there narrow tiles take over two waves and lose in their last
// (H100: 1x28672x4096 77.0 us on the GEMV, 84.0 on 64x8 tiles), while below it they won
// (1x1280x8192 16.7 against 14.7 us, 1x7168x8192 47.1 against 44.3; llama3-70b-tp8-m1 chain 348
// against 324); or where B is unaligned and row classes (core/kernel_config.h) do not take it (the GEMV reads
// it as it is). Against the GEMV's element loads, row classes won at every width: H100,
// 1x7168x8191 48.0 against 80.4 us, 1x1280x8191 17.2 against 38.1, 1x4096x4097 20.7 against 26.0;
// H200, 1x28672x4097 69.2 against 117.5, 1x24576x1535 26.7 against 47.5, 1x32768x511 18.4
// against 22.2. 33 to kRowClassesMaxN rows go transposed only to row classes, which spare B's
// copy (staged, both operands would be copied on every call).
constexpr int64_t kGemvFromN = 16384;
bool decode_for_narrow_tiles(const Problem& p) {
  if (p.m > kRowClassesMaxN || p.n < 128 || p.k == 0 || p.a.col_stride != 1 || p.b.row_stride != 1 ||
      is_fp8(p.a.dtype)) {
    return false;
  }
  const bool weights_aligned = tma_access(p.b, p.batch, p.k, p.n).ok;
  if (p.m > kNarrowMaxN) return !weights_aligned && row_classes_apply(transposed_problem(p));
  if (p.m > 1) return true;
  return weights_aligned ? p.n <= kGemvFromN : row_classes_apply(transposed_problem(p));
}

}  // namespace

Problem normalize(const Problem& p) {
  // The kernel widens 4-bit weights as A (widen.cuh): grouped, its groups then lie along N.
  if (is_4bit(p.b.dtype)) return transposed_problem(p);
  // The grouped kernel stores D by rows, whatever its layout; a dual GEMM's pairs lie along N, an
  // e4m3 D's scale blocks along its rows.
  if (p.grouped() || p.dual() || p.quantizes_d()) return p;
  const bool d_by_columns = p.d.col_stride != 1 && p.d.row_stride == 1 && p.n > 1;
  const bool column_vector = p.n == 1 && p.m > 1 && p.k > 0 && p.a.col_stride == 1;  // GEMV as one row
  if (!d_by_columns && !column_vector && !decode_for_narrow_tiles(p)) return p;
  return transposed_problem(p);
}

Problem oriented(const Problem& normalized) {
  if (normalized.grouped() || normalized.dual() || normalized.quantizes_d()) return normalized;
  const runtime::DeviceInfo& info = runtime::device_info(normalized.device);
  return transposing_pays(normalized, limits_of(info)) ? transposed_problem(normalized) : normalized;
}

Plan make_plan(const Problem& normalized, const KernelConfig* forced, cudaStream_t stream) {
  if (forced) return new_plan(normalized, forced, stream);
  // Per thread, so that calls from several threads never wait on each other; bounded, since a
  // caller that varies shapes without end would otherwise grow it without end; dropped when
  // tuning may have changed the choice.
  thread_local std::unordered_map<PlanKey, Plan, runtime::WordsHash> plans;
  thread_local uint64_t plans_generation = 0;
  const uint64_t generation = tuning::generation();
  if (generation != plans_generation) {
    plans.clear();
    plans_generation = generation;
  }
  const PlanKey key = plan_key(normalized);
  if (auto it = plans.find(key); it != plans.end()) return it->second;
  if (plans.size() >= 4096) plans.clear();
  return plans.emplace(key, new_plan(normalized, nullptr, stream)).first->second;
}

namespace {

// Runs `queue(scratch)` with `bytes` of stream-ordered scratch, given back after the work it
// queued on `stream` (also where it throws); `what` names the scratch in errors.
template <typename Queue>
void with_stream_scratch(size_t bytes, const char* what, cudaStream_t stream, Queue&& queue) {
  const auto checked = [what](cudaError_t status, const char* call) {  // the message built only on failure
    if (status != cudaSuccess) runtime::check(status, (std::string(call) + "(" + what + ")").c_str());
  };
  void* scratch = nullptr;
  checked(cudaMallocAsync(&scratch, bytes, stream), "cudaMallocAsync");
  try {
    queue(scratch);
  } catch (...) {
    cudaFreeAsync(scratch, stream);
    throw;
  }
  checked(cudaFreeAsync(scratch, stream), "cudaFreeAsync");
}

// An e4m3 D that no such kernel computes (K = 0, or coordinates past TMA's reach: the fallback
// kernel's problems; a staged operand's scratch that cannot grow while the stream is captured):
// the GEMM into f32 values in stream-ordered scratch, D's matrices dense, then quantize() of
// them into D and its scales, the same rule. A grouped problem's values start as zeros, so that
// rows no group owns quantise to zeros with scale 1.
void run_then_quantize(const Problem& p, cudaStream_t stream) {
  const int64_t matrices = p.d_batch();
  const size_t bytes = size_t(matrices * p.m * p.n) * sizeof(float);
  with_stream_scratch(bytes, "values of an e4m3 D", stream, [&](void* values) {
    if (p.grouped()) runtime::check(cudaMemsetAsync(values, 0, bytes, stream), "cudaMemsetAsync(values of an e4m3 D)");
    Problem f32 = p;
    f32.d = {values, DType::f32, matrices > 1 ? p.m * p.n : 0, p.n, 1};
    f32.scale_d = {};
    const Problem run = normalize(f32);
    run_plan(make_plan(run, nullptr, stream), run, stream);
    const TensorView x = TensorView::batched(values, DType::f32, matrices, p.m, p.n, f32.d.batch_stride, p.n, 1);
    const TensorView q = TensorView::batched(p.d.data, p.d.dtype, matrices, p.m, p.n, p.d.batch_stride, p.d.row_stride,
                                             p.d.col_stride);
    const int64_t blocks = ceil_div(p.n, 128);
    const TensorView scales = TensorView::batched(p.scale_d.data, DType::f32, matrices, p.m, blocks,
                                                  p.scale_d.batch_stride, p.scale_d.row_stride, p.scale_d.col_stride);
    quantize(x, q, scales, 1, 128, {.stream = stream});
  });
}

// FP4 x FP4 (widens_activations): B's e2m1 codes widened exactly to e4m3 into stream-ordered
// scratch, each token's K bytes contiguous (rows of a multiple of 16 bytes, as TMA reads them),
// then the W4A8 GEMM on that copy, B's mx exponents its scales as they were.
void run_on_widened_activations(const Problem& p, cudaStream_t stream) {
  const int64_t matrices = p.batch > 1 && p.b.batch_stride != 0 ? p.batch : 1, ld = ceil_div(p.k, 16) * 16;
  with_stream_scratch(size_t(std::max<int64_t>(matrices * p.n * ld, 16)), "widened activations", stream,
                      [&](void* codes) {
                        runtime::widen_e2m1(p.b, matrices, p.n, p.k, codes, ld, stream);
                        Problem e4m3 = p;
                        e4m3.b = {codes, DType::e4m3, matrices > 1 ? p.n * ld : 0, 1, ld};
                        run_plan(make_plan(e4m3, nullptr, stream), e4m3, stream);
                      });
}

// Many tokens against 4-bit weights (widens_weights_first): the weights widened into
// stream-ordered scratch, then the GEMM on the copy.
void run_on_widened_weights(const Problem& p, cudaStream_t stream) {
  const WidenedWeights w = widened_weights(p);
  with_stream_scratch(w.copy_bytes + w.scale_bytes, "widened weights", stream, [&](void* copy) {
    float* scales = w.scale_bytes > 0 ? reinterpret_cast<float*>(static_cast<char*>(copy) + w.copy_bytes) : nullptr;
    if (p.a.dtype == DType::u4) {
      runtime::widen_u4_e4m3(p.a, p.scale_a, w.matrices, p.m, p.k, copy, w.ld, scales, w.scales_ld, stream);
    } else {
      runtime::widen_mxfp4_bf16(p.a, p.scale_a.m, w.matrices, p.m, p.k, copy, w.ld, stream);
    }
    const Problem q = on_widened_weights(p, w, copy, scales);
    run_plan(make_plan(q, nullptr, stream), q, stream);
  });
}

}  // namespace

void run_plan(const Plan& plan, const Problem& normalized, cudaStream_t stream) {
  if (widens_activations(normalized)) return run_on_widened_activations(normalized, stream);
  if (plan.widens_weights_first) return run_on_widened_weights(normalized, stream);
  if (normalized.quantizes_d() && !quantizes_in_kernel(plan.config)) return run_then_quantize(normalized, stream);
  std::optional<Problem> transposed;
  if (plan.transposed) transposed = transposed_problem(normalized);
  const Problem& p = transposed ? *transposed : normalized;
  runtime::zero_reductions(p.epilogue, stream);  // once, whichever kernel runs below
  if (runtime::launch_gemm(*plan.kernel, plan.config, p, plan.sm_count, stream)) return;
  if (p.grouped()) {  // no other kernel takes groups
    throw Error(ErrorCode::invalid_argument,
                "grouped GEMM: no kernel can run it: its operands' staged copies (FP8 or 4-bit) need more workspace, which "
                "cannot grow while the stream is captured (make one call of this size before capturing it, or set "
                "a scratch allocator: gemmkit/scratch.h), or it has 2^31 tiles or more");
  }
  // Without a scratch allocator, a staged operand's scratch cannot grow while the stream is
  // captured: the realigning kernel (for row classes) or the fallback kernel reads the operands
  // as they are (correct, and slower; an uncaptured call first avoids it); for an e4m3 D, the
  // fallback kernel's f32 values, quantised after it. The fallback kernel also takes problems of more
  // work units than the TMA kernel numbers.
  if (p.quantizes_d()) return run_then_quantize(normalized, stream);
  if (plan.config.row_classes) {
    const KernelConfig realigned = realigned_instead(p, plan.config);
    if (runtime::launch_gemm(kernel_for(p.device, realigned), realigned, p, plan.sm_count, stream)) return;
  }
  const KernelConfig fallback = fallback_config(plan.config);
  runtime::launch_gemm(kernel_for(p.device, fallback), fallback, p, plan.sm_count, stream);
}

std::function<void(int)> prepare_candidate(const KernelConfig& config, const std::vector<Problem>& sets,
                                           cudaStream_t stream) {
  const Plan plan = make_plan(sets[0], &config);
  return [&sets, plan, stream](int set) { run_plan(plan, sets[size_t(set)], stream); };
}

}  // namespace gemmkit
