// Which of cuBLASLt's own fused epilogues computes what an epilogue text (gemmkit/gemm.h) does,
// so that bench can time it beside ours on the same buffers.
#pragma once

#include <cublasLt.h>

#include <optional>
#include <string>
#include <string_view>

#include "baseline/cublaslt.h"
#include "epilogue/program.h"
#include "gemmkit/gemm.h"

namespace gemmkit::baseline {

// The cuBLASLt epilogue a program matches, and the names its text gives cuBLASLt's tensors
// (empty: the kind has none): `bias`, one value a column of D; `aux`, the M x N matrix of GELU's
// input.
struct LtEpilogueMatch {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  std::string bias, aux;
};

// The match for a parsed program, compared by its canonical form (epilogue::canonical), so that
// spacing, value names, tensor names and either order of the sum or product do not matter:
//   acc + bias[n]                                          BIAS
//   relu(acc)                                              RELU
//   relu(acc + bias[n])                                    RELU_BIAS
//   gelu_tanh(acc)                                         GELU (cuBLASLt's GELU is the tanh form)
//   gelu_tanh(acc + bias[n])                               GELU_BIAS
//   pre[m, n] = acc; gelu_tanh(acc)                        GELU_AUX
//   h = acc + bias[n]; pre[m, n] = h; gelu_tanh(h)         GELU_AUX_BIAS
//   acc * dgelu_tanh(pre[m, n])                            DGELU (pre read)
//   dx = acc * dgelu_tanh(pre[m, n]); db[n] = sum(dx); dx  DGELU_BGRAD (db its bias)
// Nothing else matches: other functions (gelu is erf's), other stores, casts, constants, acc2.
std::optional<LtEpilogueMatch> match_lt_epilogue(const epilogue::Program& program);

// "GELU_AUX_BIAS": the kind as cuBLASLt names it, without CUBLASLT_EPILOGUE_.
std::string_view lt_epilogue_name(cublasLtEpilogue_t kind);

// The cuBLASLt epilogue of `epilogue`, its tensors bound by name (CublasLt::supports checks
// their dtypes and layouts); nullopt where the text matches none. Throws
// Error(invalid_argument) for a text that does not parse or a tensor it names that is missing.
std::optional<LtEpilogue> lt_epilogue(const Epilogue& epilogue);

}  // namespace gemmkit::baseline
