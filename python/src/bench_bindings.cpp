// gemmkit._gemmkit.bench: what `python -m gemmkit.bench` shares with `gemmkit bench`, so that both
// read the same suite files, time by the same method and print the same tables, summary lines and
// JSON: the suite parser (dense and grouped lines, the group sizes of each distribution), what
// the CLI decides about a grouped row before timing it, the GPU timer (warm-up, runs of every
// side alternating behind a spin kernel, each isolated from the one before, medians), the
// records and their report, and the device's properties.
#include <nanobind/nanobind.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gemmkit/error.h"
#include "gemmkit/gemmkit.h"
#include "bench/grouped_row.h"
#include "bench/report.h"
#include "runtime/device.h"
#include "bench/suite.h"
#include "tuning/gpu_timer.h"

namespace nb = nanobind;

void bind_bench(nb::module_& parent) {
  using namespace gemmkit::tools;
  nb::module_ m = parent.def_submodule("bench", "the CLI bench's suites, timer and report");

  nb::class_<SuiteProblem>(m, "SuiteProblem", "one line of a suite file")
      .def_ro("m", &SuiteProblem::m)
      .def_ro("n", &SuiteProblem::n)
      .def_ro("k", &SuiteProblem::k)
      .def_ro("batch", &SuiteProblem::batch)
      .def_ro("layout", &SuiteProblem::layout)
      .def_ro("in_dtype", &SuiteProblem::in_dtype)
      .def_ro("out_dtype", &SuiteProblem::out_dtype)
      .def_ro("mode", &SuiteProblem::mode)
      .def_ro("line", &SuiteProblem::line)
      .def_ro("epilogue", &SuiteProblem::epilogue, "the fused epilogue's text of an `epilogue` line above (empty: none)")
      .def_prop_ro("b_dtype", &SuiteProblem::b_dtype)
      .def_prop_ro("w4", &SuiteProblem::w4, "whether B is 4-bit weights (u4 or e2m1)")
      .def_prop_ro("w4a8", &SuiteProblem::w4a8, "whether B is 4-bit weights against an e4m3 A")
      .def_ro("mode_a", &SuiteProblem::mode_a,
              "W4A8 lines: A's scaling mode (tensor, rowwise, block, or mx against weights in groups of 32); none "
              "otherwise")
      .def_ro("group", &SuiteProblem::group, "4-bit weights: the K elements a scale covers (int4gG: G; mxfp4: 32)")
      .def_ro("zeros", &SuiteProblem::zeros, "4-bit weights: whether u4 B has zero points (int4gGz)")
      .def_prop_ro("bytes", &SuiteProblem::bytes,
                   "what the GEMM reads and writes at the least (gemm_bytes; 4-bit B's scales and zeros included)")
      .def_prop_ro("type_spec", [](const SuiteProblem& p) { return type_spec(p); });

  nb::class_<GroupedProblem>(m, "GroupedProblem", "one `grouped` line of a suite file")
      .def_prop_ro("op", [](const GroupedProblem& p) { return std::string(grouped_op_name(p.op)); })
      .def_prop_ro("groups", &GroupedProblem::groups)
      .def_ro("m", &GroupedProblem::m)
      .def_ro("n", &GroupedProblem::n)
      .def_ro("k", &GroupedProblem::k)
      .def_prop_ro("dist", [](const GroupedProblem& p) { return dist_spec(p.dist); })
      .def_ro("rows", &GroupedProblem::rows, "each group's rows (masked: its count)")
      .def_ro("dense", &GroupedProblem::dense, "the dense GEMM of every group's rows: the line's types and number")
      .def_prop_ro("bytes", &GroupedProblem::bytes);
  nb::class_<Suite>(m, "Suite", "a suite file's lines, dense and grouped apart, each in file order")
      .def_ro("name", &Suite::name)
      .def_ro("dense", &Suite::dense)
      .def_ro("grouped", &Suite::grouped);
  m.def("load_bench_suite", &load_bench_suite, nb::arg("path"),
        "the dense and grouped lines of a suite file; raises on a malformed line");

  // Distributions by their text in a line ("skew:10"), as parse_dist reads them.
  const auto checked_groups = [](int64_t groups) {
    if (groups < 1) throw gemmkit::Error(gemmkit::ErrorCode::invalid_argument, "groups: expected at least 1");
    return groups;
  };
  m.def(
      "split_rows",
      [checked_groups](int64_t groups, int64_t total, const std::string& dist) {
        return split_rows(checked_groups(groups), total, parse_dist(dist, "dist"));
      },
      nb::arg("groups"), nb::arg("total"), nb::arg("dist"), "contiguous groups' rows: `total` split by `dist`");
  m.def(
      "masked_rows",
      [checked_groups](int64_t groups, int64_t max_m, const std::string& dist) {
        return masked_rows(checked_groups(groups), max_m, parse_dist(dist, "dist"));
      },
      nb::arg("groups"), nb::arg("max_m"), nb::arg("dist"), "masked groups' counts within max_m, by `dist`");

  nb::class_<BenchRecord>(m, "BenchRecord", "one problem's row of the report")
      .def(nb::init<>())
      .def_rw("m", &BenchRecord::m)
      .def_rw("n", &BenchRecord::n)
      .def_rw("k", &BenchRecord::k)
      .def_rw("batch", &BenchRecord::batch)
      .def_rw("layout", &BenchRecord::layout)
      .def_rw("dtype", &BenchRecord::dtype)
      .def_rw("ours_us", &BenchRecord::ours_us)
      .def_rw("baseline_us", &BenchRecord::baseline_us)
      .def_rw("baseline_note", &BenchRecord::baseline_note)
      .def_rw("speedup", &BenchRecord::speedup)
      .def_rw("tflops", &BenchRecord::tflops)
      .def_rw("gbps", &BenchRecord::gbps)
      .def_rw("copy_us", &BenchRecord::copy_us)
      .def_rw("config", &BenchRecord::config);

  nb::class_<BenchSummary>(m, "BenchSummary")
      .def_ro("geomean_speedup", &BenchSummary::geomean_speedup)
      .def_ro("worst_shape", &BenchSummary::worst_shape)
      .def_ro("worst_speedup", &BenchSummary::worst_speedup)
      .def_ro("count", &BenchSummary::count)
      .def_ro("stand_ins", &BenchSummary::stand_ins);
  m.def("summarize", &summarize, nb::arg("records"));
  m.def("format_table", &format_table, nb::arg("records"), nb::arg("copy_gbps"), nb::arg("baseline"));
  m.def("format_summary", &format_summary, nb::arg("summary"), nb::arg("baseline"));

  nb::class_<GroupedRecord>(m, "GroupedRecord", "one grouped row of the report")
      .def(nb::init<>())
      .def_rw("op", &GroupedRecord::op)
      .def_rw("groups", &GroupedRecord::groups)
      .def_rw("m", &GroupedRecord::m)
      .def_rw("n", &GroupedRecord::n)
      .def_rw("k", &GroupedRecord::k)
      .def_rw("dtype", &GroupedRecord::dtype)
      .def_rw("dist", &GroupedRecord::dist)
      .def_rw("rows", &GroupedRecord::rows)
      .def_rw("bytes", &GroupedRecord::bytes)
      .def_rw("ours_us", &GroupedRecord::ours_us)
      .def_rw("dense_us", &GroupedRecord::dense_us)
      .def_rw("baseline_us", &GroupedRecord::baseline_us)
      .def_rw("note", &GroupedRecord::note)
      .def_rw("baseline_note", &GroupedRecord::baseline_note,
              "the stand-in the baseline ran (gemmkit bench's 4-bit rows); empty: the row itself");
  m.def("grouped_record", &grouped_record, nb::arg("problem"),
        "the row's record before timing; its note says \"not run: ...\" where gemmkit does not run it");
  m.def("group_size_values", &group_size_values, nb::arg("problem"),
        "the int32 sizes the kernels read: each group's end row (torch's offs), or its count (masked)");
  m.def("grouped_set_bytes", &grouped_set_bytes, nb::arg("problem"), "bytes of one buffer set of the row");
  m.def("grouped_name", &grouped_name, nb::arg("record"));

  nb::class_<RatioSummary>(m, "RatioSummary")
      .def_ro("count", &RatioSummary::count)
      .def_ro("geomean", &RatioSummary::geomean)
      .def_ro("worst", &RatioSummary::worst)
      .def_ro("worst_name", &RatioSummary::worst_name);
  nb::class_<GroupedSummary>(m, "GroupedSummary")
      .def_ro("roofline", &GroupedSummary::roofline)
      .def_ro("speedup", &GroupedSummary::speedup)
      .def_ro("stand_ins", &GroupedSummary::stand_ins);
  m.def("summarize_grouped", &summarize_grouped, nb::arg("records"), nb::arg("copy_gbps"));
  m.def("format_grouped_table", &format_grouped_table, nb::arg("records"), nb::arg("copy_gbps"), nb::arg("baseline"));
  m.def("format_grouped_summary", &format_grouped_summary, nb::arg("summary"), nb::arg("baseline"));

  m.def(
      "to_json",
      [](const std::vector<BenchRecord>& records, const BenchSummary& s, double copy_gbps, const std::string& baseline,
         const std::vector<GroupedRecord>& grouped) {
        nlohmann::json json = to_json(records, s, copy_gbps, baseline);
        // As gemmkit bench writes them: the grouped rows under "grouped", where there are any.
        if (!grouped.empty()) {
          json["grouped"] = grouped_json(grouped, summarize_grouped(grouped, copy_gbps), copy_gbps, baseline);
        }
        return json.dump(2);
      },
      nb::arg("records"), nb::arg("summary"), nb::arg("copy_gbps"), nb::arg("baseline"),
      nb::arg("grouped") = std::vector<GroupedRecord>{}, "the JSON text, the grouped rows under \"grouped\"");
  m.def("format_copy_bandwidth", &format_copy_bandwidth, nb::arg("copy_gbps"));
  m.def("gemm_tflops", &gemm_tflops);
  m.def("gemm_gbps", &gemm_gbps);
  m.def("copy_gbps", &copy_gbps, nb::arg("bytes"), nb::arg("us"));
  m.def("buffer_set_count", &buffer_set_count, nb::arg("set_bytes"), nb::arg("l2_bytes"), nb::arg("free_bytes"));
  m.def(
      "chosen_config",
      [](const gemmkit::TensorView& a, const gemmkit::TensorView& b, const gemmkit::TensorView& d,
         gemmkit::ScaleMode mode_a, std::optional<gemmkit::TensorView> scale_a, gemmkit::ScaleMode mode_b,
         std::optional<gemmkit::TensorView> scale_b, int64_t group, std::optional<gemmkit::TensorView> zeros) {
        gemmkit::GemmOptions options;
        options.scale_a = {mode_a, scale_a.value_or(gemmkit::TensorView{})};
        options.scale_b = {mode_b, scale_b.value_or(gemmkit::TensorView{}), group, zeros};
        return chosen_config(a, b, d, options);
      },
      nb::arg("a"), nb::arg("b"), nb::arg("d"), nb::arg("mode_a") = gemmkit::ScaleMode::none,
      nb::arg("scale_a") = nb::none(), nb::arg("mode_b") = gemmkit::ScaleMode::none, nb::arg("scale_b") = nb::none(),
      nb::arg("group") = 0, nb::arg("zeros") = nb::none(),
      "the kernel configuration gemm() runs for the problem on the current device (4-bit weights: b their "
      "packed_weight_view_of, mode_b group or mx, and B's group and zero points as gemm_4bit_tensors sets them)");

  m.def(
      "device_info",
      [](int ordinal) {
        const gemmkit::runtime::DeviceInfo& info = gemmkit::runtime::device_info(ordinal);
        nb::dict d;
        d["name"] = info.name;
        d["sm_count"] = info.sm_count;
        d["l2_bytes"] = info.l2_bytes;
        d["sm_clock_khz"] = info.sm_clock_khz;
        return d;
      },
      nb::arg("ordinal"));

  // Launchers are Python callables taking the buffer set's index; they run with the GIL held and
  // must queue their work on the timer's stream.
  nb::class_<gemmkit::tuning::GpuTimer>(m, "GpuTimer", "the bench's and autotuner's GPU timing (tuning/gpu_timer.h)")
      .def(
          "__init__",
          [](gemmkit::tuning::GpuTimer* timer, uintptr_t stream, int warmup, int runs, int sm_clock_khz) {
            new (timer) gemmkit::tuning::GpuTimer(reinterpret_cast<cudaStream_t>(stream), warmup, runs, sm_clock_khz);
          },
          nb::arg("stream"), nb::arg("warmup"), nb::arg("runs"), nb::arg("sm_clock_khz"))
      .def("median_us", &gemmkit::tuning::GpuTimer::median_us, nb::arg("sets"), nb::arg("launchers"),
           "median microseconds of each launcher, runs alternating, each on the next buffer set");
}
