// gemmkit bench's grouped rows (suite lines `grouped ...`, bench/suite.h), run as the dense rows
// are: for each row, enough buffer sets that cycling through them evicts L2 between uses of a
// set, each with fresh random inputs; the group sizes in a device int32 array; warm-up runs, then
// timed runs, alternating, of gemmkit::grouped_gemm (grouped_gemm_wgrad for wgrad rows; with
// the line's epilogue, and then without it too), of
// gemmkit::gemm on the dense GEMM of every group's rows at once (the compute floor) and of cuBLAS's
// grouped GEMM (16-bit fwd, dgrad and masked rows), each after an empty kernel it cannot overlap
// and between two events; the medians are reported. A row with 4-bit weights, for which cuBLAS
// has no grouped GEMM, then times gemmkit's grouped GEMM of the same groups in 16-bit (W4A16) or
// FP8 scaled as its A is (W4A8; mx for MXFP4 activations, FP4 x FP4, else 16-bit) on buffer sets
// of its own, its starred baseline, as a dense
// line's stand-ins are timed (bench.cpp).
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/prepare.h"
#include "baseline/cublas_grouped.h"
#include "bench/grouped_row.h"
#include "bench/progress.h"
#include "bench_buffers.h"
#include "commands.h"
#include "epilogue/program.h"
#include "gemmkit/error.h"
#include "gemmkit/grouped.h"
#include "runtime/driver.h"

namespace gemmkit::tools {
namespace {

// The view as [batch, rows, cols], also where it is one matrix.
TensorView as_batch(const TensorView& t) {
  if (t.rank == 3) return t;
  return TensorView::batched(t.data, t.dtype, 1, t.rows(), t.cols(), t.rows() * t.cols(), t.row_stride(), t.col_stride());
}

// The scale as batched operands take it: its scales (and zero points) [batch, rows, cols].
Scale batched(Scale scale) {
  scale.scales = as_batch(scale.scales);
  if (scale.zeros) scale.zeros = as_batch(*scale.zeros);
  return scale;
}

// One buffer set of a grouped row, on the buffers of two dense problems: `dense`, the dense GEMM
// of every group's rows at once (the compute floor), and `groups`, batched one matrix per group,
// whose B holds the weights [G, K, N] (4-bit: packed along K, with their scales [G, ceil(K/g),
// N] and zero points). Contiguous groups have their rows in dense's A and D; masked ones in
// groups' ([G, max_m, ...]), with A's scales alike (FP8's, and MXFP4 activations' codes with their
// exponents, as a dense line's buffers make them: bench_spec) and B's from `groups`. wgrad
// rows read x = dD and y = X from dense's A (stored [M, N]) and B ([M, K]) and write groups' D,
// with groups' scales (FP8: one set a group).
struct GroupedSet {
  reference::DeviceProblem dense, groups;
  TensorView a, b, d;
  GemmOptions options;

  GroupedSet(const reference::ProblemSpec& dense_spec, const reference::ProblemSpec& groups_spec, GroupedOp op)
      : dense(dense_spec, random_seed()), groups(groups_spec, random_seed()) {
    if (op == GroupedOp::wgrad) {
      const TensorView x_t = dense.a();  // dD^T, N x M
      a = TensorView::matrix(x_t.data, x_t.dtype, x_t.cols(), x_t.rows(), x_t.col_stride(), x_t.row_stride());
      b = dense.b();
      d = as_batch(groups.d());
      if (is_fp8(dense_spec.in)) {
        const GemmOptions scales = groups.options(nullptr);
        options.scale_a = {scales.scale_a.mode, as_batch(scales.scale_a.scales), 0, std::nullopt};
        options.scale_b = {scales.scale_b.mode, as_batch(scales.scale_b.scales), 0, std::nullopt};
      }
      return;
    }
    const bool masked = op == GroupedOp::masked;
    const reference::DeviceProblem& rows = masked ? groups : dense;
    a = masked ? as_batch(rows.a()) : rows.a();
    d = masked ? as_batch(rows.d()) : rows.d();
    b = as_batch(groups.b());
    options = rows.options(nullptr);
    if (masked && dense_spec.scale_a != ScaleMode::none) options.scale_a = batched(options.scale_a);
    if (dense_spec.scale_b != ScaleMode::none) options.scale_b = batched(groups.options(nullptr).scale_b);
  }
};

// The row's group sizes (group_size_values) in device memory.
std::unique_ptr<void, CudaFree> device_sizes(const GroupedProblem& p) {
  const std::vector<int32_t> values = group_size_values(p);
  void* data = nullptr;
  runtime::check(cudaMalloc(&data, values.size() * sizeof(int32_t)), "cudaMalloc of the group sizes");
  std::unique_ptr<void, CudaFree> owned(data);
  runtime::check(cudaMemcpy(data, values.data(), values.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
                 "copying the group sizes");
  return owned;
}

void time_stand_in(const GroupedProblem& p, GroupedRecord& record, cudaStream_t stream,
                   baseline::CublasGrouped& cublas, const tuning::GpuTimer& timer, const runtime::DeviceInfo& info,
                   int max_sms);

// Times one row that gemmkit runs: fills the record's times and, where cuBLAS cannot run the
// row, its note; a row with 4-bit weights gets its stand-in baseline (time_stand_in). Where
// `floors` is false, only our grouped GEMM is timed (a stand-in's), ours_us alone set. Returns
// how many buffer sets it cycled through.
int time_row(const GroupedProblem& p, GroupedRecord& record, cudaStream_t stream, baseline::CublasGrouped& cublas,
             const tuning::GpuTimer& timer, const runtime::DeviceInfo& info, const ConfigOverrides& overrides,
             int max_sms, bool floors = true) {
  const bool masked = p.op == GroupedOp::masked, wgrad = p.op == GroupedOp::wgrad;
  // Block scales in the layouts torch and DeepGEMM take (A's 1x128 M-major, B's 128x128 K-major),
  // which the TMA kernel reads as they are; other scales row-major, as grouped_gemm's tests have
  // them; 4-bit weights' scales N-contiguous, as GPTQ, AWQ and a dense line's have them (W4A8's
  // 1x128 A scales M-major): the layouts of a dense line's buffers (bench_spec).
  const reference::ProblemSpec dense_spec = bench_spec(p.dense);
  reference::ProblemSpec groups_spec = dense_spec;
  groups_spec.batch = p.groups();
  groups_spec.m = masked ? p.m : wgrad ? dense_spec.m : 1;  // contiguous: only its weights are used
  if (wgrad) groups_spec.k = 1;  // only its D, the gradients [G, N, K], is used
  std::vector<std::unique_ptr<GroupedSet>> pool;
  for (int s = buffer_set_count(grouped_set_bytes(p), info); s > 0; --s) {
    pool.push_back(std::make_unique<GroupedSet>(dense_spec, groups_spec, p.op));
  }
  const int sets = int(pool.size());
  const std::unique_ptr<void, CudaFree> sizes_data = device_sizes(p);
  const GroupSizes sizes{masked ? GroupLayout::masked : GroupLayout::contiguous, sizes_data.get(), false, p.groups()};

  // The line's epilogue (bench/suite.h): our side fused, its tensors per set (D's rows: the
  // contiguous groups' one matrix, or masked [G, max_m, ...]), and our grouped GEMM without it
  // timed too. One that reads acc2 makes the row a dual GEMM whose N is the accumulators', B's and
  // B2's columns side by side (dual_views), as on dense lines.
  const std::string& text = p.dense.epilogue;
  const bool fused = !text.empty(), dual = fused && epilogue::reads_acc2(epilogue::parse(text));
  // An e4m3 D, quantised in 1x128 blocks with its scales: our unfused grouped GEMM and cuBLAS
  // write a bf16 D of its shape instead (plain_d), as on dense lines.
  const bool quantized = p.dense.out_dtype == DType::e4m3, compared = fused || quantized;
  std::vector<std::unique_ptr<void, CudaFree>> plain_memory;
  std::vector<TensorView> plain_d;
  for (size_t s = 0; quantized && s < pool.size(); ++s) {
    const TensorView d = as_batch(pool[s]->d);
    void* memory = nullptr;
    runtime::check(cudaMalloc(&memory, size_t(d.batch() * d.rows() * d.cols()) * 2), "cudaMalloc(bf16 D)");
    plain_memory.emplace_back(memory);
    const TensorView dense = TensorView::batched(memory, DType::bf16, d.batch(), d.rows(), d.cols(), d.rows() * d.cols(),
                                                 d.cols(), 1);
    plain_d.push_back(pool[s]->d.rank == 2 ? TensorView::row_major(memory, DType::bf16, d.rows(), d.cols()) : dense);
  }
  std::vector<std::unique_ptr<EpilogueBuffers>> epilogues;
  std::vector<DualViews> halves;
  for (const auto& set : pool) {
    if (!fused) break;
    const TensorView d = as_batch(set->d);
    reference::ProblemSpec seen = dense_spec;  // D as the epilogue sees it
    seen.batch = masked || wgrad ? d.batch() : 1;
    seen.m = d.rows();
    seen.n = dual ? d.cols() / 2 : d.cols();
    epilogues.push_back(std::make_unique<EpilogueBuffers>(text, seen, random_seed()));
    if (dual) halves.push_back(dual_views(set->b, set->d, set->options.scale_b, grouped_name(record)));
  }
  const auto options_of = [&](const GroupedSet& set) {
    GemmOptions options = set.options;
    options.stream = stream;
    options.max_sms = max_sms;
    return options;
  };
  // Our side of set s: its operands and options, fused where the line has an epilogue.
  struct Call {
    TensorView b, d;
    GemmOptions options;
  };
  const auto our_call = [&](int s) {
    const GroupedSet& set = *pool[size_t(s)];
    Call call{set.b, set.d, options_of(set)};
    if (!fused) return call;
    call.options.epilogue = epilogues[size_t(s)]->epilogue();
    if (dual) {
      call.b = halves[size_t(s)].b;
      call.d = halves[size_t(s)].d;
      call.options.b2 = halves[size_t(s)].b2;
      call.options.scale_b = halves[size_t(s)].scale_b;
      call.options.scale_b2 = halves[size_t(s)].scale_b2;
      if (quantized) {  // the scales of D's first N columns: the first ceil(N / 128) of a row's
        TensorView& scales = call.options.scale_d.scales;
        scales.sizes[scales.rank - 1] = (call.d.cols() + 127) / 128;
      }
    }
    return call;
  };
  // With --tile and the like, each set's problem as grouped_gemm prepares it, run on the forced plan.
  std::vector<Problem> problems;
  std::optional<Plan> forced;
  if (overrides.any()) {
    for (int s = 0; s < sets; ++s) {
      const Call call = our_call(s);
      const TensorView& a = pool[size_t(s)]->a;
      problems.push_back(wgrad ? api::prepare_grouped_wgrad(a, call.b, call.d, sizes, call.options).problem
                               : api::prepare_grouped(a, call.b, call.d, sizes, call.options).problem);
    }
    forced = forced_plan(problems[0], overrides, info);
  }
  const auto ours = [&](int s) {
    if (forced) return run_plan(*forced, problems[size_t(s)], stream);
    const Call call = our_call(s);
    const TensorView& a = pool[size_t(s)]->a;
    if (wgrad) {
      grouped_gemm_wgrad(a, call.b, call.d, sizes, call.options);
    } else {
      grouped_gemm(a, call.b, call.d, sizes, call.options);
    }
  };
  // Our grouped GEMM without the epilogue (the plain one of the line's N), on fused lines.
  const auto plain = [&](int s) { return quantized ? plain_d[size_t(s)] : pool[size_t(s)]->d; };
  const auto unfused = [&](int s) {
    const GroupedSet& set = *pool[size_t(s)];
    GemmOptions options = options_of(set);
    options.scale_d = {};
    if (wgrad) {
      grouped_gemm_wgrad(set.a, set.b, plain(s), sizes, options);
    } else {
      grouped_gemm(set.a, set.b, plain(s), sizes, options);
    }
  };
  const auto dense_floor = [&](int s) {
    const reference::DeviceProblem& dense = pool[size_t(s)]->dense;
    gemm(dense.a(), dense.b(), dense.d(), dense.options(stream));
  };
  std::vector<std::function<void(int)>> launchers = {ours};
  if (floors) launchers.push_back(dense_floor);

  // cuBLAS runs the same groups on the same buffers where it can; its sizes come from the host.
  // It has no grouped GEMM of 4-bit weights: those rows' baseline is a stand-in of gemmkit's.
  std::vector<baseline::CublasGrouped::Call> calls;
  std::string why = "the weight gradient is not planned for it";
  for (size_t s = 0; s < pool.size(); ++s) {
    if (wgrad || !floors || p.dense.w4()) break;
    const GroupedSet& set = *pool[s];
    std::optional<baseline::CublasGrouped::Call> call =
        baseline::CublasGrouped::plan(set.a, set.b, plain(int(s)), sizes.layout, p.rows, &why);
    if (!call) break;
    baseline::CublasGrouped::upload(*call);
    calls.push_back(std::move(*call));
  }
  bool with_baseline = calls.size() == pool.size();
  if (with_baseline) {
    try {
      cublas.run(calls[0], stream);  // throws where cuBLAS has no kernel for the row
    } catch (const Error& e) {
      why = e.what();
      with_baseline = false;
    }
  }
  if (with_baseline) {
    launchers.push_back([&](int s) { cublas.run(calls[size_t(s)], stream); });
  } else if (floors && !p.dense.w4()) {
    record.note = "no cuBLAS baseline: " + why;
  }

  if (compared && floors) launchers.push_back(unfused);
  const std::vector<double> medians = timer.median_us(sets, launchers);
  record.ours_us = medians[0];
  if (!floors) return sets;
  record.dense_us = medians[1];
  if (with_baseline) record.baseline_us = medians[2];
  if (compared) record.unfused_us = medians.back();
  if (p.dense.w4()) time_stand_in(p, record, stream, cublas, timer, info, max_sms);
  return sets;
}

// A row with 4-bit weights: gemmkit's grouped GEMM of the same groups (grouped_stand_in) in FP8
// scaled as the row's A is (W4A8; FP4 x FP4 in mx, as a dense e2m1 line's FP8 stand-in: gemmkit
// widens MXFP4 activations to e4m3 and runs A8W4 in MX) or in 16-bit (W4A16, and W4A8 or FP4 x
// FP4 where the FP8 one is rejected, as mx FP8 may be, the note saying so),
// timed as the row is on buffer sets of its own, our side's config left to the heuristic as on a
// dense line's stand-ins, and set as the row's baseline (set_grouped_stand_in). Where neither
// runs, the row has no baseline and its note says why.
void time_stand_in(const GroupedProblem& p, GroupedRecord& record, cudaStream_t stream,
                   baseline::CublasGrouped& cublas, const tuning::GpuTimer& timer, const runtime::DeviceInfo& info,
                   int max_sms) {
  std::vector<std::string> refusals;
  // Our grouped GEMM of the stand-in's median; NaN, its refusal kept, where gemmkit rejects it.
  const auto median_of = [&](const GroupedProblem& stand_in) {
    GroupedRecord r = grouped_record(stand_in);
    try {
      time_row(stand_in, r, stream, cublas, timer, info, ConfigOverrides{}, max_sms, /*floors=*/false);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::invalid_argument) throw;
      refusals.push_back(type_spec(stand_in.dense) + ": " + e.what());
    }
    return r.ours_us;
  };
  const double fp8_us = p.dense.w4a8() || p.dense.fp4x4() ? median_of(grouped_stand_in(p, true)) : NAN;
  if (!std::isnan(fp8_us)) {
    set_grouped_stand_in(record, fp8_us, std::string(scale_mode_name(p.dense.mode_a)) + " scales");
  } else {
    set_grouped_stand_in(record, median_of(grouped_stand_in(p, false)), "");
  }
  if (!refusals.empty()) {
    std::string text;
    for (const std::string& refusal : refusals) text += (text.empty() ? "" : "; ") + refusal;
    record.note = "gemmkit's grouped GEMM rejects the stand-in " + text;
  }
}

}  // namespace

std::vector<GroupedRecord> run_grouped_rows(const std::vector<GroupedProblem>& rows, cudaStream_t stream,
                                            const tuning::GpuTimer& timer, const runtime::DeviceInfo& info,
                                            const ConfigOverrides& overrides, int max_sms) {
  baseline::CublasGrouped cublas;
  std::vector<GroupedRecord> records;
  Progress progress(rows.size());
  for (const GroupedProblem& p : rows) {
    GroupedRecord record = grouped_record(p);
    const std::string name = grouped_name(record);
    progress.begin(name);
    if (record.note.empty()) {
      try {
        const int sets = time_row(p, record, stream, cublas, timer, info, overrides, max_sms);
        char line[768];
        const bool stand_in = !record.baseline_note.empty();
        std::snprintf(line, sizeof line, "  %s: ours %.1f us, dense floor %.1f us, %s %.1f us%s (%d buffer sets)",
                      name.c_str(), record.ours_us, record.dense_us, stand_in ? "stand-in" : "cuBLAS",
                      record.baseline_us, stand_in ? (" (" + record.baseline_note + ")").c_str() : "", sets);
        progress.done(line);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::invalid_argument) throw;
        // grouped_gemm or gemm rejects the row: it is listed, not timed.
        record.ours_us = record.dense_us = record.baseline_us = NAN;
        record.note = std::string("not run: ") + e.what();
      }
    }
    if (std::isnan(record.ours_us)) {
      progress.note(name + ": " + record.note);
      progress.done("");
    }
    records.push_back(record);
  }
  progress.finish();
  return records;
}

}  // namespace gemmkit::tools
