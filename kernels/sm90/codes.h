// The codes device code knows element types and scale modes by: plain macros, shared by the
// host code (C++) and the device code (NVRTC).
#pragma once

// Element type codes, as kernel_config.cuh sets kAType, kBType, kOutType and kCType
// (the order of gemmkit::DType).
#define GEMMKIT_BF16 0
#define GEMMKIT_F16 1
#define GEMMKIT_F32 2
#define GEMMKIT_E4M3 3
#define GEMMKIT_E5M2 4
#define GEMMKIT_UE8M0 5
#define GEMMKIT_U4 6    // 4-bit, two to a byte (low nibble first)
#define GEMMKIT_E2M1 7

// Scale mode codes, as kernel_config.cuh sets kScaleA and kScaleB (the order of gemmkit::ScaleMode).
#define GEMMKIT_SCALE_NONE 0
#define GEMMKIT_SCALE_TENSOR 1
#define GEMMKIT_SCALE_ROWWISE 2
#define GEMMKIT_SCALE_BLOCK 3
#define GEMMKIT_SCALE_MX 4
#define GEMMKIT_SCALE_GROUP 5  // u4 weights' per-group scales (and zero points)
