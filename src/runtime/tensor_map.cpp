#include "runtime/tensor_map.h"

#include "runtime/driver.h"

namespace gemmkit::runtime {

CUtensorMap make_tensor_map(const MatrixRef& m, int64_t batch, int64_t rows, int64_t cols, bool cols_contiguous,
                            uint32_t box_inner, uint32_t box_outer, bool swizzled) {
  const int64_t bytes = dtype_size(m.dtype);
  const int64_t inner = cols_contiguous ? cols : rows;
  const int64_t outer = cols_contiguous ? rows : cols;
  const bool batched = batch > 1 && m.batch_stride != 0;
  // A dimension of extent 1 is never stepped along, so its stride only has to be legal.
  const int64_t outer_stride = outer > 1 ? (cols_contiguous ? m.row_stride : m.col_stride) * bytes
                                         : (inner * bytes + 15) / 16 * 16;
  const int64_t batch_stride = batched ? m.batch_stride * bytes : outer_stride * outer;

  const cuuint64_t dims[3] = {cuuint64_t(inner), cuuint64_t(outer), cuuint64_t(batched ? batch : 1)};
  const cuuint64_t strides[2] = {cuuint64_t(outer_stride), cuuint64_t(batch_stride)};
  const cuuint32_t box[3] = {box_inner, box_outer, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  // 8-bit floats travel as bytes: TMA only moves them.
  const CUtensorMapDataType type = m.dtype == DType::f32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : m.dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : m.dtype == DType::f16  ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                            : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  const uint32_t row_bytes = box_inner * uint32_t(bytes);
  const CUtensorMapSwizzle swizzle = !swizzled         ? CU_TENSOR_MAP_SWIZZLE_NONE
                                     : row_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                     : row_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                       : CU_TENSOR_MAP_SWIZZLE_32B;
  CUtensorMap map{};
  check(driver().tensor_map_encode_tiled(&map, type, 3, m.data, dims, strides, box, element_strides,
                                         CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled");
  return map;
}

}  // namespace gemmkit::runtime
