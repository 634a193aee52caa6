// The GPU reference GEMM (double accumulation), for tests and the CLI.
#pragma once

#include <cuda_runtime_api.h>

#include "core/problem.h"

namespace gemmkit::reference {

// ref and ref_abs: device arrays of batch*m*n doubles, dense [batch][m][n]; see reference.cuh.
void gpu_gemm(const Problem& p, double* ref, double* ref_abs, cudaStream_t stream);

}  // namespace gemmkit::reference
