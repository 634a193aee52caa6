// The epilogue IR (epilogue/program.h) as device code, for the kernels' store paths. For each
// element of D (batch, or a grouped kernel's group, b; row m; column n; in D's own orientation,
// whatever the plan computes) the kernel calls
//   float epilogue_value(float acc, float acc2, const EpilogueParams& e, i64 b, i64 m, i64 n, float* aux)
// with the GEMM's result there (acc2: a dual GEMM's second product, alpha * A B2; any value where
// the program does not read it, epilogue::reads_acc2): it returns D's value and puts the
// auxiliary outputs' values in aux[0, kEpilogueStores); then, for elements inside D,
//   void epilogue_store(const EpilogueParams& e, const float* aux, i64 b, i64 m, i64 n)
// writes them. EpilogueParams (kernels/sm90/params.h) holds the program's input tensors in order,
// then its outputs'; the element types are constants here, so the kernel cache key must hold
// them with the program's canonical string.
#pragma once

#include <string>
#include <vector>

#include "epilogue/program.h"

namespace gemmkit::codegen {

// The element type of each tensor of a program: its inputs', its auxiliary outputs'.
struct EpilogueTypes {
  std::vector<DType> inputs, stores;
};

std::string epilogue_source(const epilogue::Program& program, const EpilogueTypes& types);

// epilogue_source's text, made once per program (by its canonical string, `canonical`) and
// types and kept for the process: equal code, equal pointers (core/problem.h, EpilogueRef).
// Thread-safe.
const std::string* interned_epilogue(const epilogue::Program& program, const std::string& canonical,
                                     const EpilogueTypes& types);

}  // namespace gemmkit::codegen
