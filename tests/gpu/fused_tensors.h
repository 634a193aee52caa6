// A fused epilogue's tensors for the GPU tests of a GEMM (fused_gemm_test.cpp) or a grouped GEMM
// (grouped_problem.h): inputs random, outputs NaN (epilogue_tensors.h), each element of D and of
// every output checked against the epilogue evaluated in double precision on the host
// (reference/epilogue_reference.h) from the reference GEMM's value there, reductions gathered
// and checked once all of D is.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "epilogue/program.h"
#include "epilogue_tensors.h"
#include "gemmkit/tensor.h"
#include "gpu_test.h"
#include "reference/epilogue_reference.h"
#include "reference/host_numeric.h"

namespace gemmkit::testing {

// How many batches an epilogue's tensors hold (1: one for every batch): its row vectors, its
// other inputs, and its outputs.
struct Batches {
  int64_t row_vectors = 1, inputs = 1, outputs = 1;
};

// An epilogue's tensors for a problem whose D is [batches,] M x N: inputs random, outputs NaN;
// checked element by element after the run.
class FusedTensors {
 public:
  FusedTensors(const std::string& text, const std::vector<DType>& inputs, const std::vector<DType>& stores,
               Batches batches, int64_t m, int64_t n)
      : text_(text), program_(epilogue::parse(text)) {
    std::mt19937_64 draws(fresh_seed());
    for (size_t i = 0; i < program_.inputs.size(); ++i) {
      const epilogue::Shape shape = program_.inputs[i].shape;
      const int64_t count = shape == epilogue::Shape::row_vector ? batches.row_vectors : batches.inputs;
      tensors_.push_back(make_epilogue_tensor(inputs.at(i), shape, count, m, n, draws, false));
    }
    for (size_t k = 0; k < program_.stores.size(); ++k) {
      // A reduction's output is batched as an input of its index is.
      const epilogue::Shape shape = program_.stores[k].shape;
      const int64_t count = shape == epilogue::Shape::matrix          ? batches.outputs
                            : shape == epilogue::Shape::column_vector ? batches.inputs
                                                                      : batches.row_vectors;
      tensors_.push_back(make_epilogue_tensor(stores.at(k), shape, count, m, n, draws, true));
      expected_.emplace_back(tensors_.back(), program_.stores[k].reduce == epilogue::Reduce::sum);
    }
  }
  ~FusedTensors() {
    for (EpilogueTestTensor& t : tensors_) t.free();
  }
  FusedTensors(const FusedTensors&) = delete;
  FusedTensors& operator=(const FusedTensors&) = delete;

  Epilogue epilogue() const {
    Epilogue e{text_, {}};
    for (size_t i = 0; i < program_.inputs.size(); ++i) e.tensors.push_back({program_.inputs[i].name, tensors_[i].view()});
    for (size_t k = 0; k < program_.stores.size(); ++k) {
      e.tensors.push_back({program_.stores[k].name, tensors_[program_.inputs.size() + k].view()});
    }
    return e;
  }
  // The outputs as they are now on the device, for check().
  void copy_outputs() {
    outputs_.clear();
    for (size_t k = 0; k < program_.stores.size(); ++k) outputs_.push_back(tensors_[program_.inputs.size() + k].copy_back());
  }
  // D's value `got` (of type `out`) at the epilogue's (b, m, n), and each output's there, against
  // the epilogue of the reference `ref` (and a dual GEMM's second product `ref2`), allowed as far
  // as the epilogue moves within their accumulation tolerances `tol` and `tol2`, plus the stored
  // type's rounding of the value it stored (within that of the reference's) and f32 arithmetic's,
  // and for D `step` more (an e4m3 D's subnormal half step at its block's scale).
  void check(int64_t b, int64_t m, int64_t n, double ref, double tol, double got, DType out, double ref2 = 0,
             double tol2 = 0, double step = 0) {
    std::vector<double> inputs(program_.inputs.size()), at(program_.nodes.size()), moved_to(at.size());
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = tensors_[i].values[size_t(tensors_[i].offset(b, m, n))];
    reference::evaluate_epilogue(program_, ref, ref2, inputs, at);
    std::vector<double> moved(at.size(), 0.0);  // the most each node moves at the tolerances' corners
    for (double x : {ref - tol, ref + tol}) {
      for (double y : {ref2 - tol2, ref2 + tol2}) {
        reference::evaluate_epilogue(program_, x, y, inputs, moved_to);
        for (size_t i = 0; i < at.size(); ++i) moved[i] = std::max(moved[i], std::fabs(moved_to[i] - at[i]));
      }
    }
    auto expect = [&](double value, int node, DType type, const std::string& what, double absolute = 0) {
      const double want = at[size_t(node)], u = reference::unit_roundoff(type);
      const double allowed =
          (1 + u) * moved[size_t(node)] + u * std::fabs(want) + absolute + 1e-5 * (1 + std::fabs(want));
      if (std::fabs(value - want) <= allowed) return;  // false for NaN
      if (++wrong_ <= 5) {
        ADD_FAILURE() << text_ << ": " << what << " at (" << b << ", " << m << ", " << n << ") is " << value
                      << ", expected " << want << " (within " << allowed << ")";
      }
    };
    expect(got, program_.result, out, "D", step);
    for (size_t k = 0; k < program_.stores.size(); ++k) {
      const EpilogueTestTensor& t = tensors_[program_.inputs.size() + k];
      const int node = program_.stores[k].node;
      if (program_.stores[k].reduce != epilogue::Reduce::none) {
        expected_[k].add(t.offset(b, m, n), at[size_t(node)], moved[size_t(node)] + 1e-5 * (1 + std::fabs(at[size_t(node)])));
        continue;
      }
      expect(read_back(outputs_[k], t.type, t.offset(b, m, n)), node, t.type, program_.stores[k].name);
    }
  }
  // Each reduction's output against the elements check() was given: those of D, each once (the
  // library zeroed the NaN the output started as).
  void expect_reductions() {
    for (size_t k = 0; k < program_.stores.size(); ++k) {
      if (program_.stores[k].reduce != epilogue::Reduce::none) wrong_ += expected_[k].check(outputs_[k], program_.stores[k].name);
    }
  }
  // Every output element outside the outputs' views (their rows' padding) still NaN, and
  // (`owned` given) every element of the views that no group owns.
  void expect_nothing_else_written(const std::vector<bool>* owned = nullptr) const {
    for (size_t k = 0; k < program_.stores.size(); ++k) {
      if (program_.stores[k].reduce != epilogue::Reduce::none) continue;  // contiguous: no padding
      const EpilogueTestTensor& t = tensors_[program_.inputs.size() + k];
      std::vector<bool> mine(size_t(t.elements), false);
      for (int64_t b = 0; b < t.batches; ++b) {
        for (int64_t i = 0; i < t.m; ++i) {
          for (int64_t j = 0; j < t.n; ++j) {
            const bool checked = !owned || (*owned)[size_t((b * t.m + i) * t.n + j)];
            mine[size_t(t.offset(b, i, j))] = checked;
          }
        }
      }
      int64_t written = 0;
      for (int64_t i = 0; i < t.elements; ++i) {
        if (!mine[size_t(i)] && !std::isnan(read_back(outputs_[k], t.type, i))) ++written;
      }
      EXPECT_EQ(written, 0) << text_ << ": elements of " << program_.stores[k].name << " written outside what it owns";
    }
  }
  int64_t wrong() const { return wrong_; }

 private:
  std::string text_;
  epilogue::Program program_;
  std::vector<EpilogueTestTensor> tensors_;
  std::vector<std::vector<char>> outputs_;
  std::vector<ExpectedReduction> expected_;  // a store's (used where it reduces)
  int64_t wrong_ = 0;
};

}  // namespace gemmkit::testing
