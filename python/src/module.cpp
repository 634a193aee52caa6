// gemmkit._gemmkit: the C++ API as the Python package sees it. Views are built from a device
// pointer, a dtype, sizes and strides in elements (python/gemmkit turns framework tensors into
// them); gemm() is the C++ gemm(). gemmkit::Error becomes ValueError where the caller passed
// something gemmkit cannot accept, RuntimeError otherwise (no device, CUDA or compile errors).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <optional>
#include <string>

#include "gemmkit/gemmkit.h"

namespace nb = nanobind;

namespace {

using gemmkit::DType;
using gemmkit::TensorView;

void* pointer(uintptr_t address) { return reinterpret_cast<void*>(address); }

}  // namespace

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
      .value("ue8m0", DType::ue8m0);

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
          nb::arg("batch_stride"), nb::arg("row_stride"), nb::arg("col_stride"));

  m.def(
      "gemm",
      [](const TensorView& a, const TensorView& b, const TensorView& d, float alpha, float beta,
         std::optional<TensorView> c, uintptr_t stream) {
        gemmkit::GemmOptions options;
        options.alpha = alpha;
        options.beta = beta;
        options.c = c;
        options.stream = reinterpret_cast<cudaStream_t>(stream);
        gemmkit::gemm(a, b, d, options);
      },
      nb::arg("a"), nb::arg("b"), nb::arg("d"), nb::arg("alpha") = 1.0f, nb::arg("beta") = 0.0f,
      nb::arg("c") = nb::none(), nb::arg("stream") = 0, nb::call_guard<nb::gil_scoped_release>(),
      "D = alpha * A * B + beta * C on `stream` (a cudaStream_t as an integer); raises on misuse");
}
