// What gemmkit bench and python -m gemmkit.bench decide alike about a grouped row (a suite's
// `grouped` line, bench/suite.h) before either times it: its record, with the reason gemmkit does
// not run it where it does not; the group sizes the kernels read; the bytes of a buffer set.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/report.h"
#include "bench/suite.h"

namespace gemmkit::tools {

// The row's record before timing: the line's op, G, M, N, K, types, distribution, total rows and
// bytes, no times, and a note "not run: ..." where gemmkit does not run the row (FP8 wgrad or
// dgrad, more rows than int32 sizes hold); an empty note otherwise.
GroupedRecord grouped_record(const GroupedProblem& p);

// The sizes grouped_gemm reads (gemmkit/grouped.h), as the bench puts them in device memory:
// each group's end row (contiguous groups, torch's offs) or row count (masked), int32. The row
// must be one that grouped_record() does not mark "not run".
std::vector<int32_t> group_size_values(const GroupedProblem& p);

// Bytes of one buffer set of the row, what buffer_set_count() takes: A, B and D of the dense GEMM
// of every group's rows (the compute floor, whose A and D the contiguous groups share), and the
// groups' own operands: their weights [G, N, K] (masked: with A [G, max_m, K] and D [G, max_m,
// N]; wgrad: the gradients [G, N, K] instead), as gemm_bytes counts them (4-bit weights packed,
// with their scales; FP8 scales left out).
double grouped_set_bytes(const GroupedProblem& p);

// A row with 4-bit weights, for which no cuBLAS grouped GEMM exists: the same groups (G, rows,
// N, K, op, distribution and epilogue) with the types of the dense line's stand-ins
// (bench/suite.h), 16-bit (dense16_problem: W4A16's A type, bf16 for W4A8 and FP4 x FP4) or,
// where `fp8`, e4m3 with A scaled as the row's A is (fp8_problem: W4A8's mode_a for both
// operands; mx for an e2m1 A), which gemmkit
// bench times through gemmkit's own grouped GEMM as the row's baseline.
GroupedProblem grouped_stand_in(const GroupedProblem& p, bool fp8);

}  // namespace gemmkit::tools
