#include "tensor_views.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nb = nanobind;

namespace gemmkit::python {
namespace {

// Framework dtype objects are singletons: compared by identity. Kept alive for the process.
std::vector<std::pair<nb::object, DType>>& dtypes() {
  static auto* table = new std::vector<std::pair<nb::object, DType>>();
  return *table;
}

// An attribute's name as an interned string, made once: looked up by a ready key, an attribute
// costs about half as much as by a C string.
struct Names {
  nb::object dtype = interned("dtype"), data_ptr = interned("data_ptr"), shape = interned("shape"),
             stride = interned("stride");
  static nb::object interned(const char* name) { return nb::steal(PyUnicode_InternFromString(name)); }
};
const Names& names() {
  static const Names* names = new Names();
  return *names;
}

DType dtype_of(nb::handle tensor, const char* name) {
  const nb::object dtype = tensor.attr(names().dtype);
  for (const auto& [object, type] : dtypes()) {
    if (object.is(dtype)) return type;
  }
  throw nb::type_error((std::string(name) + ": dtype " + nb::str(dtype).c_str() +
                        " is not supported; expected bfloat16, float16, float8_e4m3fn or float8_e5m2 (float32 for "
                        "outputs, c and scales)")
                           .c_str());
}

// Integer dtype objects, each with whether it is 64-bit (register_size_dtype); as dtypes().
std::vector<std::pair<nb::object, bool>>& size_dtypes() {
  static auto* table = new std::vector<std::pair<nb::object, bool>>();
  return *table;
}

void* data_of(nb::handle tensor) { return reinterpret_cast<void*>(nb::cast<uintptr_t>(tensor.attr(names().data_ptr)())); }

}  // namespace

void register_dtype(nb::handle framework_dtype, DType dtype) {
  dtypes().emplace_back(nb::borrow(framework_dtype), dtype);
}

void register_size_dtype(nb::handle framework_dtype, bool int64) {
  size_dtypes().emplace_back(nb::borrow(framework_dtype), int64);
}

TensorView view_of(nb::handle tensor, const char* name) {
  const DType dtype = dtype_of(tensor, name);
  const nb::tuple shape = nb::tuple(tensor.attr(names().shape));
  const nb::tuple stride = nb::tuple(tensor.attr(names().stride)());
  auto at = [](const nb::tuple& t, size_t i) { return nb::cast<int64_t>(t[i]); };
  if (shape.size() == 2) return TensorView::matrix(data_of(tensor), dtype, at(shape, 0), at(shape, 1), at(stride, 0), at(stride, 1));
  if (shape.size() == 3) {
    return TensorView::batched(data_of(tensor), dtype, at(shape, 0), at(shape, 1), at(shape, 2), at(stride, 0),
                               at(stride, 1), at(stride, 2));
  }
  throw nb::value_error((std::string(name) + ": " + std::to_string(shape.size()) + " dimensions; expected 2 or 3").c_str());
}

TensorView packed_weight_view_of(nb::handle bytes, DType dtype, int64_t k, const char* name) {
  const std::string prefix = std::string(name) + ": ";
  if (!is_4bit(dtype)) {
    throw nb::value_error((prefix + "dtype " + std::string(dtype_name(dtype)) + "; expected u4 or e2m1").c_str());
  }
  const nb::tuple shape = nb::tuple(bytes.attr(names().shape));
  if (shape.size() != 2 && shape.size() != 3) {
    throw nb::value_error((prefix + std::to_string(shape.size()) +
                           " dimensions; expected 2, [N, ceil(K/2)] bytes, or 3, [G, N, ceil(K/2)]")
                              .c_str());
  }
  const nb::tuple stride = nb::tuple(bytes.attr(names().stride)());
  const size_t last = shape.size() - 1;  // the bytes along K; the one before, N
  const int64_t n = nb::cast<int64_t>(shape[last - 1]), cols = nb::cast<int64_t>(shape[last]);
  const int64_t row_stride = nb::cast<int64_t>(stride[last - 1]), col_stride = nb::cast<int64_t>(stride[last]);
  std::string lead, lead_strides;  // a batch's [G, ...] in the messages
  if (shape.size() == 3) {
    lead = std::to_string(nb::cast<int64_t>(shape[0])) + ", ";
    lead_strides = std::to_string(nb::cast<int64_t>(stride[0])) + ", ";
  }
  if (k < 0 || cols != (k + 1) / 2) {
    throw nb::value_error((prefix + "shape [" + lead + std::to_string(n) + ", " + std::to_string(cols) +
                           "]; expected [" + (lead.empty() ? "" : "G, ") + "N, ceil(K/2)] = [" + lead +
                           std::to_string(n) + ", " + std::to_string((k + 1) / 2) + "] bytes for K = " +
                           std::to_string(k))
                              .c_str());
  }
  if (cols > 1 && col_stride != 1) {
    throw nb::value_error((prefix + "strides [" + lead_strides + std::to_string(row_stride) + ", " +
                           std::to_string(col_stride) + "]; expected the bytes along K contiguous (stride 1)")
                              .c_str());
  }
  if (shape.size() == 3) {  // [G, N, ceil(K/2)]: G x K x N, each matrix its bytes' batch stride apart
    return TensorView::batched(data_of(bytes), dtype, nb::cast<int64_t>(shape[0]), k, n,
                               2 * nb::cast<int64_t>(stride[0]), 1, 2 * row_stride);
  }
  return TensorView::matrix(data_of(bytes), dtype, k, n, 1, 2 * row_stride);
}

TensorView packed_activation_view_of(nb::handle bytes, const char* name) {
  const nb::tuple shape = nb::tuple(bytes.attr(names().shape));
  if (shape.size() != 2 && shape.size() != 3) {
    throw nb::value_error((std::string(name) + ": " + std::to_string(shape.size()) +
                           " dimensions; expected 2, [M, K/2] bytes of MXFP4 activations, or 3, [G, max_m, K/2]")
                              .c_str());
  }
  const TensorView t = packed_weight_view_of(bytes, DType::e2m1, 2 * nb::cast<int64_t>(shape[shape.size() - 1]), name);
  if (t.rank == 3) {  // G x K x max_m: each group's rows, its bytes' batch stride apart
    return TensorView::batched(t.data, t.dtype, t.batch(), t.cols(), t.rows(), t.batch_stride(), t.col_stride(),
                               t.row_stride());
  }
  return TensorView::matrix(t.data, t.dtype, t.cols(), t.rows(), t.col_stride(), t.row_stride());
}

TensorView scale_view_of(nb::handle scales, const char* name, bool of_a) {
  const nb::tuple shape = nb::tuple(scales.attr(names().shape));
  if (shape.size() >= 2) return view_of(scales, name);
  const DType dtype = dtype_of(scales, name);
  const int64_t n = shape.size() == 0 ? 1 : nb::cast<int64_t>(shape[0]);
  const int64_t stride = shape.size() == 0 ? 1 : nb::cast<int64_t>(nb::tuple(scales.attr(names().stride)())[0]);
  if (n == 1) return TensorView::matrix(data_of(scales), dtype, 1, 1, 1, 1);
  return of_a ? TensorView::matrix(data_of(scales), dtype, n, 1, stride, 1)
              : TensorView::matrix(data_of(scales), dtype, 1, n, n * stride, stride);
}

GroupSizes group_sizes_of(nb::handle sizes, const char* name, GroupLayout layout, bool check) {
  const nb::object dtype = sizes.attr(names().dtype);
  const std::string prefix = std::string(name) + ": ";
  const auto known = std::find_if(size_dtypes().begin(), size_dtypes().end(),
                                  [&](const auto& entry) { return entry.first.is(dtype); });
  if (known == size_dtypes().end()) {
    const std::string text = prefix + "dtype " + nb::str(dtype).c_str() + " is not supported; expected int32 or int64";
    throw nb::type_error(text.c_str());
  }
  const nb::tuple shape = nb::tuple(sizes.attr(names().shape));
  if (shape.size() != 1) {
    const std::string text = prefix + std::to_string(shape.size()) + " dimensions; expected 1 (one value a group)";
    throw nb::value_error(text.c_str());
  }
  const int64_t count = nb::cast<int64_t>(shape[0]);
  const int64_t stride = nb::cast<int64_t>(nb::tuple(sizes.attr(names().stride)())[0]);
  if (count > 1 && stride != 1) {
    const std::string text = prefix + "stride " + std::to_string(stride) + "; expected 1 (values one after another)";
    throw nb::value_error(text.c_str());
  }
  GroupSizes result;
  result.layout = layout;
  result.data = data_of(sizes);
  result.int64 = known->second;
  result.count = count;
  result.check = check;
  return result;
}

}  // namespace gemmkit::python
