// The whole public API of gemmkit.
#pragma once

#include "gemmkit/error.h"
#include "gemmkit/gemm.h"
#include "gemmkit/grouped.h"
#include "gemmkit/quantize.h"
#include "gemmkit/scratch.h"
#include "gemmkit/tensor.h"
#include "gemmkit/tuning.h"
#include "gemmkit/version.h"
