// The epilogue IR (epilogue/program.h) evaluated in double precision, one element at a time: the
// reference that tests and verify hold fused kernels to.
#pragma once

#include <span>

#include "epilogue/program.h"

namespace gemmkit::reference {

// Fills values[i] with node i's value at one element of D, whose GEMM result is `acc` (and, in a
// dual GEMM, whose second product A B2 is `acc2`; unused where the program reads no acc2) and
// where inputs[j] is tensor j's value (already broadcast to the element). D's value is
// values[program.result], store s's values[program.stores[s].node]. values holds a value a node.
void evaluate_epilogue(const epilogue::Program& program, double acc, double acc2, std::span<const double> inputs,
                       std::span<double> values);

}  // namespace gemmkit::reference
