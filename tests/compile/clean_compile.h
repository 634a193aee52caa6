// The compile tests' check: a kernel source compiles with NVRTC for sm_90a, and ptxas reports no
// spills and no stack frame.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "runtime/nvrtc_compiler.h"

namespace gemmkit::testing {

inline void expect_clean_compile(const std::string& source, const std::string& entry, const std::string& what) {
  runtime::CompiledKernel compiled;
  try {
    compiled = runtime::compile_kernel(source, entry);
  } catch (const std::exception& e) {
    FAIL() << what << ": " << e.what();
  }
  const runtime::PtxasReport& r = compiled.report;
  EXPECT_FALSE(compiled.cubin.empty()) << what;
  EXPECT_GT(r.registers, 0) << what << ": no ptxas report in the log:\n" << compiled.log;
  EXPECT_EQ(r.spill_store_bytes, 0) << what << "\n" << compiled.log;
  EXPECT_EQ(r.spill_load_bytes, 0) << what << "\n" << compiled.log;
  EXPECT_EQ(r.stack_bytes, 0) << what << "\n" << compiled.log;
  // ptxas serializes wgmma (waits after each) where the pipeline crosses a call: slow, not wrong.
  EXPECT_EQ(compiled.log.find("C7510"), std::string::npos) << what << "\n" << compiled.log;
}

}  // namespace gemmkit::testing
