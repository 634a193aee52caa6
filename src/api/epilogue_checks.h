// The checks of a fused epilogue's arguments (gemmkit/gemm.h, Epilogue): its text parsed (once
// per text), each tensor it names given once, shaped, typed and aligned for the problem. Each
// throws Error(invalid_argument) naming the tensor, what it was and what was expected.
#pragma once

#include <span>

#include "api/device_checks.h"
#include "api/tensor_checks.h"
#include "core/problem.h"
#include "gemmkit/gemm.h"

namespace gemmkit::api {

// A dual GEMM's epilogue where the caller gives no text (gemm.h, GemmOptions::b2): SwiGLU.
inline constexpr const char* kDualEpilogue = "silu(acc) * acc2";

// The epilogue as the kernels take it, for the validated problem `p` (its batch: D's batch, or
// the groups of a grouped problem, whose groups p.groups describes). None where the text is empty
// and the problem is not dual. A text reads acc2 exactly where the problem is dual.
EpilogueRef epilogue_ref(const Epilogue& epilogue, const Problem& p);

// The epilogue's tensors as operands for check_device_memory, over p's batch, into `out`
// (at least kMaxEpilogueTensors long); returns how many.
size_t epilogue_operands(const Epilogue& epilogue, const Problem& p, std::span<Operand> out);

// Its outputs apart from D and from every tensor the call reads, and its inputs apart from D and
// from its outputs (D's or an output's element read after another tile wrote it would differ).
// `inputs` are the call's other operands (A, B, C, scales).
void check_epilogue_apart(const Epilogue& epilogue, const Problem& p, const ByteRange& d,
                          std::span<const Operand> inputs);

}  // namespace gemmkit::api
