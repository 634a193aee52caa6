#include "bench/grouped_row.h"

#include <climits>
#include <numeric>

namespace gemmkit::tools {
namespace {

int64_t total_rows(const GroupedProblem& p) { return std::accumulate(p.rows.begin(), p.rows.end(), int64_t(0)); }

// Why gemmkit does not run the row; empty where it does.
std::string not_run_reason(const GroupedProblem& p) {
  if (p.op == GroupedOp::wgrad && (p.dense.mode == ScaleMode::block || p.dense.mode == ScaleMode::mx)) {
    return "not run: grouped_gemm_wgrad takes tensor or rowwise scales (blocks along the tokens would straddle "
           "groups)";
  }
  if (total_rows(p) > INT32_MAX) return "not run: more rows than the bench's int32 group sizes hold";
  return "";
}

}  // namespace

GroupedRecord grouped_record(const GroupedProblem& p) {
  GroupedRecord record;
  record.op = grouped_op_name(p.op);
  record.groups = p.groups();
  record.m = p.m;
  record.n = p.n;
  record.k = p.k;
  record.dtype = type_spec(p.dense);
  record.dist = dist_spec(p.dist);
  record.epilogue = p.dense.out_dtype == DType::e4m3 ? (p.dense.epilogue.empty() ? "acc" : p.dense.epilogue) + " -> e4m3 1x128"
                                                    : p.dense.epilogue;
  record.rows = total_rows(p);
  record.bytes = p.bytes();
  record.note = not_run_reason(p);
  return record;
}

std::vector<int32_t> group_size_values(const GroupedProblem& p) {
  std::vector<int32_t> values;
  int64_t end = 0;
  for (int64_t rows : p.rows) {
    end += rows;
    values.push_back(int32_t(p.op == GroupedOp::masked ? rows : end));
  }
  return values;
}

double grouped_set_bytes(const GroupedProblem& p) {
  const SuiteProblem& dense = p.dense;
  // The groups' buffers as batched problems: contiguous groups use only their B (the weights),
  // with one row of A and D each; wgrad only its D (the gradients), with one column of A and row
  // of B each.
  const bool masked = p.op == GroupedOp::masked, wgrad = p.op == GroupedOp::wgrad;
  const int64_t group_m = masked ? p.m : wgrad ? dense.m : 1;
  // A, B and D of `batch` M x N x K products in the row's types (4-bit weights packed, with their
  // scales).
  const auto operands = [&](int64_t batch, int64_t m, int64_t n, int64_t k) {
    return gemm_bytes(m, n, k, batch, dense.in_dtype, dense.b_dtype(), dense.out_dtype, dense.group, dense.zeros);
  };
  return operands(1, dense.m, dense.n, dense.k) + operands(p.groups(), group_m, dense.n, wgrad ? 1 : dense.k);
}

GroupedProblem grouped_stand_in(const GroupedProblem& p, bool fp8) {
  GroupedProblem stand_in = p;
  stand_in.dense = fp8 ? fp8_problem(p.dense) : dense16_problem(p.dense);
  stand_in.dense.epilogue = p.dense.epilogue;
  return stand_in;
}

}  // namespace gemmkit::tools
