// gemmkit._gemmkit: the C++ API as the Python package sees it. Views are built from a device
// pointer, a dtype, sizes and strides in elements; gemm(), quantize() and the tuning mode are the
// C++ functions. gemm_tensors(), grouped_gemm_tensors(), grouped_gemm_wgrad_tensors() and
// quantize_tensors() take framework tensors (python/gemmkit's torch tensors) and read their views
// and group sizes here (tensor_views.h); gemm_tensors() and gemm() take a dual GEMM's second B
// (GemmOptions::b2) and its FP8 scales (GemmOptions::scale_b2, in scale_b's mode) as optional
// arguments, and swiglu_tensors() makes B and B2 of SwiGLU's weights itself
// (grouped_swiglu_tensors() of the experts' weights, for grouped_gemm()), with FP8 weights' scales
// given as the two halves' views (scale_b, scale_b2). Each of them takes an e4m3 D's scales as an
// optional scale_d (GemmOptions::scale_d, block mode). gemm_4bit_tensors() takes 4-bit weights
// as checkpoints store them, [N, ceil(K/2)] bytes, and makes B's u4 or e2m1 view of them itself
// (packed_weight_view_of, also bound for tests), with group or MX scales and, for an e4m3 A
// (W4A8), A's scales in mode_a, or MXFP4 activations' [M, K/2] bytes as an e2m1 A
// (packed_activation_view_of, FP4 x FP4); grouped_gemm_4bit_tensors() the same for grouped_gemm()
// (a 16-bit, e4m3 or e2m1 A), the experts' [G, N, ceil(K/2)] bytes with their scales [G, ...];
// quantize_4bit_tensors() makes such weights from [N, K] ones with the same views (quantize_int4,
// quantize_mxfp4).
// set_scratch_allocator() makes two Python callables (torch's caching allocator, from
// python/gemmkit/_torch.py) gemmkit's scratch allocator (gemmkit/scratch.h). gemmkit::Error
// becomes ValueError where the caller passed something gemmkit cannot accept, RuntimeError
// otherwise (no device, CUDA or compile errors).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gemmkit/gemmkit.h"
#include "tensor_views.h"

namespace nb = nanobind;

namespace {

using gemmkit::DType;
using gemmkit::GroupLayout;
using gemmkit::GroupSizes;
using gemmkit::ScaleMode;
using gemmkit::TensorView;

void* pointer(uintptr_t address) { return reinterpret_cast<void*>(address); }
cudaStream_t stream_of(uintptr_t stream) { return reinterpret_cast<cudaStream_t>(stream); }

gemmkit::GemmOptions gemm_options(float alpha, float beta, std::optional<TensorView> c, uintptr_t stream,
                                  ScaleMode mode_a, std::optional<TensorView> scale_a, ScaleMode mode_b,
                                  std::optional<TensorView> scale_b) {
  gemmkit::GemmOptions options;
  options.alpha = alpha;
  options.beta = beta;
  options.c = c;
  options.stream = stream_of(stream);
  options.scale_a = {mode_a, scale_a.value_or(TensorView{})};
  options.scale_b = {mode_b, scale_b.value_or(TensorView{})};
  return options;
}

// The view of an optional framework tensor (None: none).
std::optional<TensorView> optional_view(nb::handle tensor, const char* name) {
  if (tensor.is_none()) return std::nullopt;
  return gemmkit::python::view_of(tensor, name);
}

// The views of a product with 4-bit weights of `dtype` (gemm_4bit_tensors, grouped_gemm_4bit_tensors):
// A, x as it is or, with packed_x, MXFP4 activations' bytes as e2m1 codes (packed_activation_view_of:
// M x K, or masked G x max_m x K), and B = W^T, the weights' bytes w for A's K (packed_weight_view_of).
std::pair<TensorView, TensorView> w4_operands(nb::handle x, nb::handle w, DType dtype, bool packed_x) {
  const TensorView va =
      packed_x ? gemmkit::python::packed_activation_view_of(x, "x") : gemmkit::python::view_of(x, "x");
  return {va, gemmkit::python::packed_weight_view_of(w, dtype, va.cols(), dtype == DType::u4 ? "qweight" : "weight")};
}

// The options of a product with 4-bit weights of `dtype`: u4 with group scales (and zero points;
// ScaleMode::group, `group` K elements a scale) or e2m1 with ue8m0 scales (ScaleMode::mx), and an
// e4m3 x's scales (W4A8; None: none) in mode_a, all framework tensors.
gemmkit::GemmOptions w4_options(DType dtype, nb::handle scales, nb::handle zeros, int64_t group, uintptr_t stream,
                                ScaleMode mode_a, nb::handle scale_a) {
  gemmkit::GemmOptions options;
  options.stream = stream_of(stream);
  options.scale_b.mode = dtype == DType::u4 ? ScaleMode::group : ScaleMode::mx;
  options.scale_b.scales = gemmkit::python::view_of(scales, "scales");
  options.scale_b.group = group;
  options.scale_b.zeros = optional_view(zeros, "zeros");
  if (!scale_a.is_none()) options.scale_a = {mode_a, gemmkit::python::scale_view_of(scale_a, "x_scale", true)};
  return options;
}

// D's scales where D is e4m3 and quantised in 1x128 blocks (GemmOptions::scale_d, which takes
// block mode alone), a framework tensor (None: D is not e4m3).
void set_scale_d(gemmkit::GemmOptions& options, nb::handle scale_d) {
  if (!scale_d.is_none()) options.scale_d = {ScaleMode::block, gemmkit::python::view_of(scale_d, "scale_d")};
}

// B2's scales (GemmOptions::scale_b2) where the dual GEMM's B2 is FP8: scale_b's mode, a framework
// tensor viewed as scale_b is (None: none).
void set_scale_b2(gemmkit::GemmOptions& options, ScaleMode mode_b, nb::handle scale_b2) {
  if (!scale_b2.is_none()) options.scale_b2 = {mode_b, gemmkit::python::scale_view_of(scale_b2, "scale_b2", false)};
}

// gemm_options() with C and the scales given as framework tensors (None: none).
gemmkit::GemmOptions tensor_options(float alpha, float beta, nb::handle c, uintptr_t stream, ScaleMode mode_a,
                                    nb::handle scale_a, ScaleMode mode_b, nb::handle scale_b) {
  using gemmkit::python::scale_view_of;
  return gemm_options(
      alpha, beta, optional_view(c, "c"), stream, mode_a,
      scale_a.is_none() ? std::nullopt : std::optional(scale_view_of(scale_a, "scale_a", true)), mode_b,
      scale_b.is_none() ? std::nullopt : std::optional(scale_view_of(scale_b, "scale_b", false)));
}

// The view of an epilogue's tensor used as `index` says ("n", "m", "mn" or "": name[]), as
// epilogue_of takes it.
TensorView epilogue_view(nb::handle tensor, const std::string& name, const std::string& index) {
  if (index == "mn") return gemmkit::python::view_of(tensor, name.c_str());
  const TensorView view = gemmkit::python::scale_view_of(tensor, name.c_str(), index == "m");
  // name[]: a 1-D tensor of B values is one a batch, [B, 1, 1] (scale_view_of made it a row).
  if (index.empty() && view.rank == 2 && view.cols() > 1 && nb::len(nb::tuple(tensor.attr("shape"))) == 1) {
    return TensorView::batched(view.data, view.dtype, view.cols(), 1, 1, view.col_stride(), 1, 1);
  }
  return view;
}

// A fused epilogue's text and its tensors, given as (name, framework tensor, index) triples
// (python/gemmkit/_torch.py, epilogue_pairs): a vector read or written as name[n] or name[m]
// ("n", "m") may be 1-D, viewed here as [1, N] or [M, 1], and a scalar (name[], index "") 0-d or
// 1-D, [1, 1] or [B, 1, 1] (one value a batch), without a tensor op in Python (each costs a
// microsecond or more); others are 2-D or 3-D as the C++ API takes them.
gemmkit::Epilogue epilogue_of(const std::string& text, nb::handle tensors) {
  gemmkit::Epilogue epilogue{text, {}};
  for (nb::handle triple : tensors) {
    const std::string name = nb::cast<std::string>(triple[0]);
    epilogue.tensors.push_back({name, epilogue_view(triple[1], name, nb::cast<std::string>(triple[2]))});
  }
  return epilogue;
}

// SwiGLU's B and B2, each K x I, from its weights as torch.nn.Linear stores them ([I, K] rows): w
// the gate's and w_up the up's, or (w_up None) the halves of one [2I, K] w, its first and last I
// rows or (interleaved) its even and odd rows. The views are made here rather than by slicing and
// transposing tensors in Python, each of which costs a microsecond or more. `grouped`: the
// experts' weights, [G, I, K] or [G, 2I, K], give B and B2 [G, K, I] (grouped_gemm's b2), each
// expert's rows as above and the batch stride the weights'.
std::pair<TensorView, TensorView> swiglu_operands(nb::handle w, nb::handle w_up, bool interleaved,
                                                  bool grouped = false) {
  const int rank = grouped ? 3 : 2;
  const std::string group = grouped ? "G, " : "";
  auto refuse_rank = [&](const char* name, int got, const std::string& shapes) {
    const std::string text = std::string(name) + ": " + std::to_string(got) + " dimensions; expected " +
                             std::to_string(rank) + ", " + shapes;
    throw nb::value_error(text.c_str());
  };
  const TensorView vw = gemmkit::python::view_of(w, "w");
  if (vw.rank != rank) refuse_rank("w", vw.rank, "[" + group + "I, K] or [" + group + "2I, K]");
  // rows [first, first + step * count) of v (of each of its matrices), every step-th, transposed:
  // K x count.
  auto transposed = [](const TensorView& v, int64_t first, int64_t count, int64_t step) {
    char* data = static_cast<char*>(v.data) + first * v.row_stride() * gemmkit::dtype_size(v.dtype);
    if (v.rank == 3) {
      return TensorView::batched(data, v.dtype, v.batch(), v.cols(), count, v.batch_stride(), v.col_stride(),
                                 v.row_stride() * step);
    }
    return TensorView::matrix(data, v.dtype, v.cols(), count, v.col_stride(), v.row_stride() * step);
  };
  if (!w_up.is_none()) {
    const TensorView vu = gemmkit::python::view_of(w_up, "w_up");
    if (vu.rank != rank) refuse_rank("w_up", vu.rank, "[" + group + "I, K]");
    return {transposed(vw, 0, vw.rows(), 1), transposed(vu, 0, vu.rows(), 1)};
  }
  const int64_t half = vw.rows() / 2;
  if (interleaved) return {transposed(vw, 0, half, 2), transposed(vw, 1, half, 2)};
  return {transposed(vw, 0, half, 1), transposed(vw, half, half, 1)};
}

// The Python callables of set_scratch_allocator, called by the C++ allocator's two functions
// below, which take the GIL (the tensor bindings release it around gemmkit calls).
struct PythonScratch {
  nb::object allocate, release;
};

// A Python exception leaves as nb::python_error, which the binding that called gemmkit raises
// again as it was (torch.OutOfMemoryError, say).
void* allocate_scratch(void* context, size_t bytes, cudaStream_t stream) {
  nb::gil_scoped_acquire gil;
  const nb::object pointer = static_cast<const PythonScratch*>(context)->allocate(bytes, uintptr_t(stream));
  return reinterpret_cast<void*>(nb::cast<uintptr_t>(pointer));
}

// Must not throw (gemmkit/scratch.h): a Python exception goes to sys.unraisablehook.
void release_scratch(void* context, void* data, size_t, cudaStream_t) {
  nb::gil_scoped_acquire gil;
  try {
    static_cast<const PythonScratch*>(context)->release(reinterpret_cast<uintptr_t>(data));
  } catch (nb::python_error& e) {
    e.discard_as_unraisable("gemmkit's scratch release");
  }
}

void set_scratch_allocator(nb::object allocate, nb::object release) {
  if (allocate.is_none() != release.is_none()) {
    throw nb::type_error("set_scratch_allocator: give both allocate and release, or neither");
  }
  if (allocate.is_none()) {
    gemmkit::set_scratch_allocator(nullptr);
    return;
  }
  // Never freed: a gemmkit call running on another thread may still be calling the callables
  // this replaces; and their references must not be dropped once the interpreter is gone.
  const gemmkit::ScratchAllocator allocator{allocate_scratch, release_scratch, new PythonScratch{allocate, release}};
  gemmkit::set_scratch_allocator(&allocator);
  // At exit, before the interpreter finalises, so that no later gemmkit call (a daemon thread's,
  // say) reaches into it.
  static bool reset_at_exit = false;
  if (!reset_at_exit) {
    nb::module_::import_("atexit").attr("register")(nb::cpp_function([] { gemmkit::set_scratch_allocator(nullptr); }));
    reset_at_exit = true;
  }
}

}  // namespace

void bind_bench(nb::module_& parent);  // bench_bindings.cpp

NB_MODULE(_gemmkit, m) {
  m.doc() = "gemmkit's C++ library (matrix multiplies for Hopper GPUs); use the gemmkit package";

  nb::register_exception_translator([](const std::exception_ptr& error, void*) {
    try {
      std::rethrow_exception(error);
    } catch (const gemmkit::Error& e) {
      PyErr_SetString(e.code() == gemmkit::ErrorCode::invalid_argument ? PyExc_ValueError : PyExc_RuntimeError,
                      e.what());
    }
  });

  nb::enum_<DType>(m, "DType")
      .value("bf16", DType::bf16)
      .value("f16", DType::f16)
      .value("f32", DType::f32)
      .value("e4m3", DType::e4m3)
      .value("e5m2", DType::e5m2)
      .value("ue8m0", DType::ue8m0)
      .value("u4", DType::u4)
      .value("e2m1", DType::e2m1);

  nb::enum_<ScaleMode>(m, "ScaleMode", "how an FP8 or 4-bit operand's scales are laid out (gemmkit/gemm.h)")
      .value("none", ScaleMode::none)
      .value("tensor", ScaleMode::tensor)
      .value("rowwise", ScaleMode::rowwise)
      .value("block", ScaleMode::block)
      .value("mx", ScaleMode::mx)
      .value("group", ScaleMode::group);

  nb::enum_<GroupLayout>(m, "GroupLayout", "how the groups' rows lie in A and D (gemmkit/grouped.h)")
      .value("contiguous", GroupLayout::contiguous)
      .value("masked", GroupLayout::masked);

  nb::enum_<gemmkit::TuningMode>(m, "TuningMode", "where gemm() takes its kernel configuration (gemmkit/tuning.h)")
      .value("off", gemmkit::TuningMode::off)
      .value("database", gemmkit::TuningMode::database)
      .value("online", gemmkit::TuningMode::online);

  nb::class_<TensorView>(m, "TensorView", "[batch,] rows x cols on the device, strides in elements")
      .def_static(
          "matrix",
          [](uintptr_t data, DType dtype, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
            return TensorView::matrix(pointer(data), dtype, rows, cols, row_stride, col_stride);
          },
          nb::arg("data"), nb::arg("dtype"), nb::arg("rows"), nb::arg("cols"), nb::arg("row_stride"),
          nb::arg("col_stride"))
      .def_static(
          "batched",
          [](uintptr_t data, DType dtype, int64_t batch, int64_t rows, int64_t cols, int64_t batch_stride,
             int64_t row_stride, int64_t col_stride) {
            return TensorView::batched(pointer(data), dtype, batch, rows, cols, batch_stride, row_stride,
                                       col_stride);
          },
          nb::arg("data"), nb::arg("dtype"), nb::arg("batch"), nb::arg("rows"), nb::arg("cols"),
          nb::arg("batch_stride"), nb::arg("row_stride"), nb::arg("col_stride"))
      .def_static(
          "row_major",
          [](uintptr_t data, DType dtype, int64_t rows, int64_t cols) {
            return TensorView::row_major(pointer(data), dtype, rows, cols);
          },
          nb::arg("data"), nb::arg("dtype"), nb::arg("rows"), nb::arg("cols"), "rows x cols, strides (cols, 1)")
      .def_static(
          "col_major",
          [](uintptr_t data, DType dtype, int64_t rows, int64_t cols) {
            return TensorView::col_major(pointer(data), dtype, rows, cols);
          },
          nb::arg("data"), nb::arg("dtype"), nb::arg("rows"), nb::arg("cols"), "rows x cols, strides (1, rows)")
      .def_prop_ro("data", [](const TensorView& v) { return reinterpret_cast<uintptr_t>(v.data); })
      .def_ro("dtype", &TensorView::dtype)
      .def_prop_ro("shape", [](const TensorView& v) { return std::vector<int64_t>(v.sizes, v.sizes + v.rank); })
      .def_prop_ro("strides", [](const TensorView& v) { return std::vector<int64_t>(v.strides, v.strides + v.rank); });

  m.def(
      "gemm",
      [](const TensorView& a, const TensorView& b, const TensorView& d, float alpha, float beta,
         std::optional<TensorView> c, uintptr_t stream, ScaleMode mode_a, std::optional<TensorView> scale_a,
         ScaleMode mode_b, std::optional<TensorView> scale_b, std::optional<TensorView> b2,
         std::optional<TensorView> scale_d, std::optional<TensorView> scale_b2) {
        gemmkit::GemmOptions options = gemm_options(alpha, beta, c, stream, mode_a, scale_a, mode_b, scale_b);
        options.b2 = b2;
        if (scale_b2) options.scale_b2 = {mode_b, *scale_b2};
        if (scale_d) options.scale_d = {ScaleMode::block, *scale_d};
        gemmkit::gemm(a, b, d, options);
      },
      nb::arg("a"), nb::arg("b"), nb::arg("d"), nb::arg("alpha") = 1.0f, nb::arg("beta") = 0.0f,
      nb::arg("c") = nb::none(), nb::arg("stream") = 0, nb::arg("mode_a") = ScaleMode::none,
      nb::arg("scale_a") = nb::none(), nb::arg("mode_b") = ScaleMode::none, nb::arg("scale_b") = nb::none(),
      nb::arg("b2") = nb::none(), nb::arg("scale_d") = nb::none(), nb::arg("scale_b2") = nb::none(),
      nb::call_guard<nb::gil_scoped_release>(),
      "D = alpha * A * B + beta * C on `stream` (a cudaStream_t as an integer), FP8 operands scaled by "
      "their modes and scale views; with b2 (a second K x N B of B's dtype, no C), the dual GEMM "
      "D = silu(A B) * (A B2) (SwiGLU), an FP8 b2 scaled by scale_b2 in mode_b (GemmOptions::scale_b2, "
      "shaped as scale_b); an e4m3 D is quantised in 1x128 blocks, its f32 scales written to "
      "scale_d ([batch,] M x ceil(N/128), block mode); raises on misuse");

  m.def(
      "quantize",
      [](const TensorView& x, const TensorView& q, const TensorView& scales, int64_t block_rows, int64_t block_cols,
         bool power_of_two_scales, uintptr_t stream) {
        gemmkit::quantize(x, q, scales, block_rows, block_cols, {power_of_two_scales, stream_of(stream)});
      },
      nb::arg("x"), nb::arg("q"), nb::arg("scales"), nb::arg("block_rows"), nb::arg("block_cols"),
      nb::arg("power_of_two_scales") = false, nb::arg("stream") = 0, nb::call_guard<nb::gil_scoped_release>(),
      "q, scales = x quantised to FP8 in blocks of block_rows x block_cols (gemmkit/quantize.h)");

  m.def("register_dtype", &gemmkit::python::register_dtype, nb::arg("framework_dtype"), nb::arg("dtype"),
        "tells the *_tensors functions which DType a framework's dtype object stands for");
  m.def("register_size_dtype", &gemmkit::python::register_size_dtype, nb::arg("framework_dtype"), nb::arg("int64"),
        "tells the grouped *_tensors functions that a framework's dtype object holds 32-bit or (int64) 64-bit "
        "group sizes");
  m.def(
      "view_of", [](nb::handle tensor, const char* name) { return gemmkit::python::view_of(tensor, name); },
      nb::arg("tensor"), nb::arg("name"), "the view of a 2-D or 3-D framework tensor");
  m.def(
      "scale_view_of",
      [](nb::handle scales, const char* name, bool of_a) { return gemmkit::python::scale_view_of(scales, name, of_a); },
      nb::arg("scales"), nb::arg("name"), nb::arg("of_a"), "the view of A's (of_a) or B's scales");
  m.def(
      "packed_weight_view_of",
      [](nb::handle bytes, DType dtype, int64_t k, const char* name) {
        return gemmkit::python::packed_weight_view_of(bytes, dtype, k, name);
      },
      nb::arg("bytes"), nb::arg("dtype"), nb::arg("k"), nb::arg("name"),
      "the K x N view (dtype u4 or e2m1, strides in nibbles {1, 2 * row stride}) of 4-bit weights stored as "
      "[N, ceil(K/2)] bytes, two K elements a byte");
  m.def(
      "packed_activation_view_of",
      [](nb::handle bytes, const char* name) { return gemmkit::python::packed_activation_view_of(bytes, name); },
      nb::arg("bytes"), nb::arg("name"),
      "the M x K e2m1 view (strides in nibbles {2 * row stride, 1}) of MXFP4 activations stored as [M, K/2] "
      "bytes, two codes a byte along K");
  m.def(
      "gemm_4bit_tensors",
      [](nb::handle x, nb::handle w, nb::handle d, DType dtype, nb::handle scales, nb::handle zeros, int64_t group,
         uintptr_t stream, ScaleMode mode_a, nb::handle scale_a, bool packed_x) {
        const auto [va, vb] = w4_operands(x, w, dtype, packed_x);
        const TensorView vd = gemmkit::python::view_of(d, "out");
        const gemmkit::GemmOptions options = w4_options(dtype, scales, zeros, group, stream, mode_a, scale_a);
        nb::gil_scoped_release unlocked;
        gemmkit::gemm(va, vb, vd, options);
      },
      nb::arg("x"), nb::arg("w"), nb::arg("d"), nb::arg("dtype"), nb::arg("scales"), nb::arg("zeros").none(),
      nb::arg("group"), nb::arg("stream"), nb::arg("mode_a") = ScaleMode::none, nb::arg("scale_a") = nb::none(),
      nb::arg("packed_x") = false,
      "gemm() of 4-bit weights on framework tensors: d [M, N] = x [M, K] @ W^T, W [N, K] given as w, its [N, "
      "ceil(K/2)] bytes (packed_weight_view_of), read as B = W^T of `dtype`: u4 with group scales ceil(K/group) x N "
      "of x's dtype and optional zero points of the same (ScaleMode::group, `group` K elements a scale), or e2m1 "
      "with ue8m0 scales ceil(K/32) x N (ScaleMode::mx, group 0 or 32); scales and zeros are 2-D, any strides; an "
      "e4m3 x (W4A8) is scaled by scale_a in mode_a (tensor, rowwise or block, f32; or mx, ue8m0 [M, ceil(K/32)], "
      "against weights in groups of 32), viewed as gemm_tensors' scale_a; with packed_x, x is MXFP4 activations, "
      "[M, K/2] bytes of e2m1 codes (packed_activation_view_of), scaled by scale_a in mode mx (FP4 x FP4)");
  m.def(
      "grouped_gemm_4bit_tensors",
      [](nb::handle x, nb::handle w, nb::handle d, DType dtype, nb::handle scales, nb::handle zeros, int64_t group,
         nb::handle sizes, GroupLayout layout, bool check, uintptr_t stream, ScaleMode mode_a, nb::handle scale_a,
         int max_sms, const std::string& epilogue, nb::handle epilogue_tensors, bool packed_x) {
        const auto [va, vb] = w4_operands(x, w, dtype, packed_x);
        const char* w_name = dtype == DType::u4 ? "qweight" : "weight";
        if (vb.rank != 3) {
          throw nb::value_error((std::string(w_name) + ": 2 dimensions; expected 3, [G, N, ceil(K/2)] bytes").c_str());
        }
        const TensorView vd = gemmkit::python::view_of(d, "out");
        const GroupSizes vs = gemmkit::python::group_sizes_of(sizes, layout == GroupLayout::masked ? "counts" : "offs",
                                                              layout, check);
        gemmkit::GemmOptions options = w4_options(dtype, scales, zeros, group, stream, mode_a, scale_a);
        options.max_sms = max_sms;
        if (!epilogue.empty()) options.epilogue = epilogue_of(epilogue, epilogue_tensors);
        nb::gil_scoped_release unlocked;
        gemmkit::grouped_gemm(va, vb, vd, vs, options);
      },
      nb::arg("x"), nb::arg("w"), nb::arg("d"), nb::arg("dtype"), nb::arg("scales"), nb::arg("zeros").none(),
      nb::arg("group"), nb::arg("sizes"), nb::arg("layout"), nb::arg("check"), nb::arg("stream"),
      nb::arg("mode_a") = ScaleMode::none, nb::arg("scale_a") = nb::none(), nb::arg("max_sms") = 0,
      nb::arg("epilogue") = "", nb::arg("epilogue_tensors") = nb::none(), nb::arg("packed_x") = false,
      "grouped_gemm() of 4-bit weights on framework tensors, as gemm_4bit_tensors for each group: d = x_g @ W_g^T "
      "for each group's rows of x ([M_total, K] contiguous, `sizes` the ends; [G, max_m, K] masked, the counts), "
      "the experts' weights W [G, N, K] given as w, their [G, N, ceil(K/2)] bytes (packed_weight_view_of: B = W^T, "
      "G x K x N of `dtype`); u4's group scales and optional zero points [G, ceil(K/group), N], e2m1's ue8m0 scales "
      "[G, ceil(K/32), N], any strides; an e4m3 x (W4A8) scaled by scale_a in mode_a (tensor, rowwise, block: "
      "1x128, or mx exponents against weights in groups of 32), viewed as gemm_tensors' scale_a; with packed_x, x "
      "is MXFP4 activations, [M_total, K/2] or masked [G, max_m, K/2] bytes of e2m1 codes "
      "(packed_activation_view_of), scaled by scale_a in mode mx (FP4 x FP4); with a fused epilogue's text and "
      "(name, tensor, index) triples, as grouped_gemm_tensors'");
  m.def(
      "quantize_4bit_tensors",
      [](nb::handle w, nb::handle q, nb::handle scales, nb::handle zeros, DType dtype, int64_t group,
         uintptr_t stream) {
        const bool u4 = dtype == DType::u4;
        const TensorView vw = gemmkit::python::view_of(w, "w");
        if (vw.rank != 2) throw nb::value_error("w: 3 dimensions; expected 2, [N, K]");
        // B = W^T, K x N, as gemm() takes it (and gemm_4bit_tensors passes it).
        const TensorView w_kn =
            TensorView::matrix(vw.data, vw.dtype, vw.cols(), vw.rows(), vw.col_stride(), vw.row_stride());
        const TensorView vq = gemmkit::python::packed_weight_view_of(q, dtype, vw.cols(), u4 ? "qweight" : "weight");
        TensorView vs = gemmkit::python::view_of(scales, "scales");
        // MXFP4's [N, ceil(K/32)] exponents are B's ceil(K/32) x N scales transposed.
        if (!u4) vs = TensorView::matrix(vs.data, vs.dtype, vs.cols(), vs.rows(), vs.col_stride(), vs.row_stride());
        if (!u4 && !zeros.is_none()) throw nb::value_error("zeros: given with MXFP4 weights; expected None");
        const std::optional<TensorView> vz = optional_view(zeros, "zeros");
        gemmkit::QuantizeOptions options;
        options.stream = stream_of(stream);
        nb::gil_scoped_release unlocked;
        if (u4) {
          gemmkit::quantize_int4(w_kn, vq, vs, vz, group, options);
        } else {
          gemmkit::quantize_mxfp4(w_kn, vq, vs, options);
        }
      },
      nb::arg("w"), nb::arg("q"), nb::arg("scales"), nb::arg("zeros").none(), nb::arg("dtype"), nb::arg("group"),
      nb::arg("stream"),
      "quantize_int4() (dtype u4) or quantize_mxfp4() (e2m1) on framework tensors, the views gemm_4bit_tensors "
      "takes: w [N, K] (torch.nn.Linear's layout, any strides) read as B = W^T, K x N; q its [N, ceil(K/2)] bytes "
      "(packed_weight_view_of); u4's scales and optional zeros ceil(K/group) x N of bf16 or f16, as they are; "
      "e2m1's ue8m0 scales [N, ceil(K/32)], read as their transpose (group 32, no zeros)");
  m.def(
      "gemm_tensors",
      [](nb::handle a, nb::handle b, nb::handle d, float alpha, float beta, nb::handle c, uintptr_t stream,
         ScaleMode mode_a, nb::handle scale_a, ScaleMode mode_b, nb::handle scale_b, const std::string& epilogue,
         nb::handle epilogue_tensors, nb::handle b2, nb::handle scale_d, nb::handle scale_b2) {
        const TensorView va = gemmkit::python::view_of(a, "a"), vb = gemmkit::python::view_of(b, "b");
        const TensorView vd = gemmkit::python::view_of(d, "out");
        gemmkit::GemmOptions options = tensor_options(alpha, beta, c, stream, mode_a, scale_a, mode_b, scale_b);
        if (!b2.is_none()) options.b2 = gemmkit::python::view_of(b2, "b2");  // viewed as b is
        set_scale_b2(options, mode_b, scale_b2);
        set_scale_d(options, scale_d);
        if (!epilogue.empty()) options.epilogue = epilogue_of(epilogue, epilogue_tensors);
        nb::gil_scoped_release unlocked;
        gemmkit::gemm(va, vb, vd, options);
      },
      nb::arg("a"), nb::arg("b"), nb::arg("d"), nb::arg("alpha"), nb::arg("beta"), nb::arg("c").none(),
      nb::arg("stream"), nb::arg("mode_a"), nb::arg("scale_a").none(), nb::arg("mode_b"), nb::arg("scale_b").none(),
      nb::arg("epilogue") = "", nb::arg("epilogue_tensors") = nb::none(), nb::arg("b2") = nb::none(),
      nb::arg("scale_d") = nb::none(), nb::arg("scale_b2") = nb::none(),
      "gemm() on framework tensors (see register_dtype), with a fused epilogue's text and (name, tensor, index) "
      "triples; b2, a second B of b's shape, makes it a dual GEMM (GemmOptions::b2), whose epilogue reads that "
      "product as acc2 (an empty text: \"silu(acc) * acc2\"); scale_b2, an FP8 b2's scales in mode_b, viewed as "
      "scale_b is (GemmOptions::scale_b2); scale_d, an e4m3 d's f32 scales, [batch,] M x ceil(N/128) "
      "(GemmOptions::scale_d)");
  m.def(
      "swiglu_tensors",
      [](nb::handle x, nb::handle w, nb::handle w_up, bool interleaved, nb::handle d, uintptr_t stream,
         const std::string& epilogue, nb::handle epilogue_tensors, nb::handle scale_d, ScaleMode mode_a,
         nb::handle scale_a, ScaleMode mode_b, nb::handle scale_b, nb::handle scale_b2) {
        const TensorView va = gemmkit::python::view_of(x, "x");
        const auto [vb, vb2] = swiglu_operands(w, w_up, interleaved);
        const TensorView vd = gemmkit::python::view_of(d, "out");
        gemmkit::GemmOptions options = tensor_options(1.0f, 0.0f, nb::none(), stream, mode_a, scale_a, mode_b, scale_b);
        options.b2 = vb2;
        set_scale_b2(options, mode_b, scale_b2);
        set_scale_d(options, scale_d);
        if (!epilogue.empty()) options.epilogue = epilogue_of(epilogue, epilogue_tensors);
        nb::gil_scoped_release unlocked;
        gemmkit::gemm(va, vb, vd, options);
      },
      nb::arg("x"), nb::arg("w"), nb::arg("w_up").none(), nb::arg("interleaved"), nb::arg("d"), nb::arg("stream"),
      nb::arg("epilogue") = "", nb::arg("epilogue_tensors") = nb::none(), nb::arg("scale_d") = nb::none(),
      nb::arg("mode_a") = ScaleMode::none, nb::arg("scale_a") = nb::none(), nb::arg("mode_b") = ScaleMode::none,
      nb::arg("scale_b") = nb::none(), nb::arg("scale_b2") = nb::none(),
      "the dual GEMM of SwiGLU's up-projection on framework tensors: d [M, I] = the epilogue (empty: "
      "\"silu(acc) * acc2\") of acc = x @ gate^T and acc2 = x @ up^T, gate and up [I, K] each: w and w_up, or "
      "(w_up None) the halves of one [2I, K] w, its first and last I rows or (interleaved) its even and odd rows; "
      "with a fused epilogue's (name, tensor, index) triples, and an e4m3 d's scales [M, ceil(I/128)] (scale_d); "
      "FP8 x and weights with x's scales (scale_a, mode_a) and the gate's and up's, each laid out as B's for "
      "B = gate^T or up^T (scale_b and scale_b2, mode_b)");
  m.def(
      "grouped_swiglu_tensors",
      [](nb::handle x, nb::handle w, nb::handle w_up, bool interleaved, nb::handle d, nb::handle sizes,
         GroupLayout layout, bool check, uintptr_t stream, int max_sms, const std::string& epilogue,
         nb::handle epilogue_tensors, nb::handle scale_d, ScaleMode mode_a, nb::handle scale_a, ScaleMode mode_b,
         nb::handle scale_b, nb::handle scale_b2) {
        const TensorView va = gemmkit::python::view_of(x, "x");
        const auto [vb, vb2] = swiglu_operands(w, w_up, interleaved, true);
        const TensorView vd = gemmkit::python::view_of(d, "out");
        const GroupSizes vs = gemmkit::python::group_sizes_of(sizes, layout == GroupLayout::masked ? "counts" : "offs",
                                                              layout, check);
        gemmkit::GemmOptions options = tensor_options(1.0f, 0.0f, nb::none(), stream, mode_a, scale_a, mode_b, scale_b);
        options.max_sms = max_sms;
        options.b2 = vb2;
        set_scale_b2(options, mode_b, scale_b2);
        set_scale_d(options, scale_d);
        if (!epilogue.empty()) options.epilogue = epilogue_of(epilogue, epilogue_tensors);
        nb::gil_scoped_release unlocked;
        gemmkit::grouped_gemm(va, vb, vd, vs, options);
      },
      nb::arg("x"), nb::arg("w"), nb::arg("w_up").none(), nb::arg("interleaved"), nb::arg("d"), nb::arg("sizes"),
      nb::arg("layout"), nb::arg("check"), nb::arg("stream"), nb::arg("max_sms"), nb::arg("epilogue") = "",
      nb::arg("epilogue_tensors") = nb::none(), nb::arg("scale_d") = nb::none(), nb::arg("mode_a") = ScaleMode::none,
      nb::arg("scale_a") = nb::none(), nb::arg("mode_b") = ScaleMode::none, nb::arg("scale_b") = nb::none(),
      nb::arg("scale_b2") = nb::none(),
      "the grouped dual GEMM of the MoE up-projection on framework tensors: for each group (expert) g, its rows "
      "of d = the epilogue (empty: \"silu(acc) * acc2\") of acc = x_g @ gate_g^T and acc2 = x_g @ up_g^T, gate and "
      "up [G, I, K]: w and w_up, or (w_up None) the halves of each expert's rows of one [G, 2I, K] w, its first and "
      "last I or (interleaved) its even and odd rows; x [M_total, K] and d [M_total, I] with `sizes` the groups' "
      "cumulative row ends (contiguous), or x [G, max_m, K] and d [G, max_m, I] with each group's row count "
      "(masked), as grouped_gemm_tensors; with a fused epilogue's (name, tensor, index) triples, and an e4m3 d's "
      "scales, d's shape with ceil(I/128) columns (scale_d); FP8 x and weights with x's scales (scale_a, mode_a) "
      "and the gates' and ups' [G, ...] (scale_b and scale_b2, mode_b), as grouped_gemm_tensors' scale_b");
  m.def(
      "epilogue_tensor_uses",
      [](const std::string& text) {
        using gemmkit::EpilogueIndex, gemmkit::EpilogueReduce;
        std::vector<std::tuple<std::string, const char*, bool, std::optional<std::string>>> uses;
        for (const gemmkit::EpilogueTensorUse& u : gemmkit::epilogue_tensor_uses(text)) {
          const char* index = u.index == EpilogueIndex::n ? "n" : u.index == EpilogueIndex::m ? "m"
                              : u.index == EpilogueIndex::none                             ? ""
                                                                                           : "mn";
          std::optional<std::string> reduce;
          if (u.reduce != EpilogueReduce::none) reduce = u.reduce == EpilogueReduce::sum ? "sum" : "amax";
          uses.emplace_back(u.name, index, u.output, reduce);
        }
        return uses;
      },
      nb::arg("text"),
      "(name, index, output, reduce) for each tensor an epilogue's text names, inputs by first use, then outputs: "
      "index 'n' (name[n]), 'm' (name[m]), 'mn' (name[m, n]) or '' (name[], one value a batch); reduce 'sum' or "
      "'amax' for a reduction's output (name[n] = sum(...)), else None");
  m.def(
      "grouped_gemm_tensors",
      [](nb::handle a, nb::handle b, nb::handle d, nb::handle sizes, GroupLayout layout, bool check, bool zero_unowned,
         float alpha, uintptr_t stream, ScaleMode mode_a, nb::handle scale_a, ScaleMode mode_b, nb::handle scale_b,
         int max_sms, const std::string& epilogue, nb::handle epilogue_tensors, nb::handle scale_d) {
        const TensorView va = gemmkit::python::view_of(a, "a"), vb = gemmkit::python::view_of(b, "b");
        const TensorView vd = gemmkit::python::view_of(d, "out");
        GroupSizes vs = gemmkit::python::group_sizes_of(sizes, layout == GroupLayout::masked ? "counts" : "offs",
                                                        layout, check);
        vs.zero_unowned = zero_unowned;
        gemmkit::GemmOptions options =
            tensor_options(alpha, 0.0f, nb::none(), stream, mode_a, scale_a, mode_b, scale_b);
        options.max_sms = max_sms;
        set_scale_d(options, scale_d);
        if (!epilogue.empty()) options.epilogue = epilogue_of(epilogue, epilogue_tensors);
        nb::gil_scoped_release unlocked;
        gemmkit::grouped_gemm(va, vb, vd, vs, options);
      },
      nb::arg("a"), nb::arg("b"), nb::arg("d"), nb::arg("sizes"), nb::arg("layout"), nb::arg("check"),
      nb::arg("zero_unowned"), nb::arg("alpha"), nb::arg("stream"), nb::arg("mode_a"), nb::arg("scale_a").none(), nb::arg("mode_b"),
      nb::arg("scale_b").none(), nb::arg("max_sms"), nb::arg("epilogue") = "", nb::arg("epilogue_tensors") = nb::none(),
      nb::arg("scale_d") = nb::none(),
      "grouped_gemm() on framework tensors, the group sizes a 1-D int32 or int64 tensor (gemmkit/grouped.h), with a "
      "fused epilogue's text and (name, tensor, index) triples, and an e4m3 d's scales, d's shape with ceil(N/128) "
      "columns (scale_d)");
  m.def(
      "grouped_gemm_wgrad_tensors",
      [](nb::handle x, nb::handle y, nb::handle d, nb::handle sizes, bool check, float alpha, float beta,
         nb::handle c, uintptr_t stream, ScaleMode mode_a, nb::handle scale_a, ScaleMode mode_b, nb::handle scale_b,
         int max_sms, const std::string& epilogue, nb::handle epilogue_tensors, nb::handle scale_d) {
        const TensorView vx = gemmkit::python::view_of(x, "x"), vy = gemmkit::python::view_of(y, "y");
        const TensorView vd = gemmkit::python::view_of(d, "out");
        const GroupSizes vs = gemmkit::python::group_sizes_of(sizes, "offs", GroupLayout::contiguous, check);
        gemmkit::GemmOptions options = tensor_options(alpha, beta, c, stream, mode_a, scale_a, mode_b, scale_b);
        options.max_sms = max_sms;
        set_scale_d(options, scale_d);
        if (!epilogue.empty()) options.epilogue = epilogue_of(epilogue, epilogue_tensors);
        nb::gil_scoped_release unlocked;
        gemmkit::grouped_gemm_wgrad(vx, vy, vd, vs, options);
      },
      nb::arg("x"), nb::arg("y"), nb::arg("d"), nb::arg("sizes"), nb::arg("check"), nb::arg("alpha"),
      nb::arg("beta"), nb::arg("c").none(), nb::arg("stream"), nb::arg("mode_a"), nb::arg("scale_a").none(),
      nb::arg("mode_b"), nb::arg("scale_b").none(), nb::arg("max_sms"), nb::arg("epilogue") = "",
      nb::arg("epilogue_tensors") = nb::none(), nb::arg("scale_d") = nb::none(),
      "grouped_gemm_wgrad() on framework tensors, the group ends a 1-D int32 or int64 tensor; scale_a is x's "
      "scales (A = x^T), scale_b y's; with a fused epilogue's text and (name, tensor, index) triples, d [G, P, Q] "
      "its D, and an e4m3 d's scales [G, P, ceil(Q/128)] (scale_d)");
  m.def(
      "quantize_tensors",
      [](nb::handle x, nb::handle q, nb::handle scales, int64_t block_rows, int64_t block_cols,
         bool power_of_two_scales, uintptr_t stream) {
        const TensorView vx = gemmkit::python::view_of(x, "x"), vq = gemmkit::python::view_of(q, "q");
        const TensorView vs = gemmkit::python::view_of(scales, "scales");
        nb::gil_scoped_release unlocked;
        gemmkit::quantize(vx, vq, vs, block_rows, block_cols, {power_of_two_scales, stream_of(stream)});
      },
      nb::arg("x"), nb::arg("q"), nb::arg("scales"), nb::arg("block_rows"), nb::arg("block_cols"),
      nb::arg("power_of_two_scales"), nb::arg("stream"), "quantize() on framework tensors (see register_dtype)");

  m.def("version", &gemmkit::version, "the library's release, e.g. \"0.1.0\" (gemmkit.__version__)");
  m.def("git_commit", &gemmkit::git_commit,
        "the git commit the library was built from, \"+dirty\" appended for uncommitted changes; \"\" where "
        "the source was not a git checkout (gemmkit.__git_commit__)");

  m.def("set_scratch_allocator", &set_scratch_allocator, nb::arg("allocate").none(), nb::arg("release").none(),
        "takes the scratch of every later gemmkit call from allocate(nbytes, stream) -> device pointer, given "
        "back by release(pointer) once the call's kernels are queued on that stream (gemmkit/scratch.h); "
        "None, None: gemmkit's own per-stream buffers again");

  m.def("tuning_mode", &gemmkit::tuning_mode, "the mode gemm() picks kernels by");
  m.def("set_tuning_mode", &gemmkit::set_tuning_mode, nb::arg("mode"),
        "sets the mode for the whole process (see gemmkit/tuning.h)");
  // The mode by name too, as GEMMKIT_TUNING and the README spell it.
  m.def(
      "set_tuning_mode",
      [](nb::str name) {
        gemmkit::TuningMode mode;
        if (!nb::try_cast(nb::getattr(nb::type<gemmkit::TuningMode>(), name, nb::none()), mode)) {
          const std::string message = "mode: '" + std::string(name.c_str()) + "'; expected 'off', 'database' or 'online'";
          throw nb::value_error(message.c_str());
        }
        gemmkit::set_tuning_mode(mode);
      },
      nb::arg("mode"), "the same, the mode given by its name: 'off', 'database' or 'online'");

  bind_bench(m);
}
