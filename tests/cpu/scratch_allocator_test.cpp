// A launch's scratch from a scratch allocator (gemmkit/scratch.h, runtime/workspace.h), with no
// GPU: the allocator is a fake over host memory, and the needs leave out the split-K counters
// (whose home outside a capture is the stream's buffer, which asks the device).
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gemmkit/error.h"
#include "gemmkit/scratch.h"
#include "runtime/workspace.h"

namespace gemmkit {
namespace {

using runtime::LaunchScratch;
using runtime::WorkspaceNeeds;

struct FakeFailure : std::runtime_error {
  FakeFailure() : std::runtime_error("fake allocator failure") {}
};

// Hands out pieces of an aligned arena, one per call; the `fail_at`-th call (from 1) throws
// FakeFailure, or returns nullptr with `null`, or a misaligned pointer with `misaligned`.
struct FakeAllocator {
  alignas(256) char arena[4][4096];
  std::vector<std::pair<void*, size_t>> allocated, released;
  cudaStream_t stream_seen = nullptr;
  int fail_at = 0;
  bool null = false, misaligned = false;

  static void* allocate(void* context, size_t bytes, cudaStream_t stream) {
    auto& self = *static_cast<FakeAllocator*>(context);
    self.stream_seen = stream;
    const bool fails = int(self.allocated.size()) + 1 == self.fail_at;
    if (fails && self.null) return nullptr;
    if (fails && !self.misaligned) throw FakeFailure();
    void* data = self.arena[self.allocated.size()] + (fails ? 16 : 0);
    self.allocated.push_back({data, bytes});
    return data;
  }
  static void release(void* context, void* data, size_t bytes, cudaStream_t) {
    static_cast<FakeAllocator*>(context)->released.push_back({data, bytes});
  }
};

const cudaStream_t kStream = reinterpret_cast<cudaStream_t>(uintptr_t(0x5000));
const WorkspaceNeeds kStagedAndPartials = {.partial_bytes = 1000, .staged_a_bytes = 300, .staged_b_bytes = 200};

class LaunchScratchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ScratchAllocator allocator{FakeAllocator::allocate, FakeAllocator::release, &fake_};
    set_scratch_allocator(&allocator);
  }
  void TearDown() override { set_scratch_allocator(nullptr); }

  // What the fake allocated, in the order of release.
  std::vector<std::pair<void*, size_t>> allocated_backwards() const {
    return {fake_.allocated.rbegin(), fake_.allocated.rend()};
  }

  // The scratch of kStagedAndPartials fails with `code`, its message holding `says`, having
  // released what it allocated.
  void expect_error(ErrorCode code, const std::string& says) {
    try {
      const LaunchScratch scratch(0, kStream, kStagedAndPartials);
      ADD_FAILURE() << "no error; expected one saying " << says;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_EQ(fake_.released, allocated_backwards());
  }

  FakeAllocator fake_;
};

TEST_F(LaunchScratchTest, EachPartIsAllocatedOnTheStreamAndReleasedWhenTheLaunchEnds) {
  {
    const LaunchScratch scratch(0, kStream, kStagedAndPartials);
    ASSERT_NE(scratch.workspace(), nullptr);
    ASSERT_EQ(fake_.allocated.size(), 3u);
    EXPECT_EQ(fake_.stream_seen, kStream);
    EXPECT_EQ(scratch.workspace()->partials, fake_.allocated[0].first);
    EXPECT_EQ(fake_.allocated[0].second, 1000u);
    EXPECT_EQ(scratch.workspace()->staged_a, fake_.allocated[1].first);
    EXPECT_EQ(fake_.allocated[1].second, 300u);
    EXPECT_EQ(scratch.workspace()->staged_b, fake_.allocated[2].first);
    EXPECT_EQ(fake_.allocated[2].second, 200u);
    EXPECT_TRUE(fake_.released.empty());
  }
  EXPECT_EQ(fake_.released, allocated_backwards());
}

TEST_F(LaunchScratchTest, PartsNotNeededAreNotAllocated) {
  {
    const LaunchScratch nothing(0, kStream, {});
    EXPECT_EQ(nothing.workspace(), nullptr);
    const LaunchScratch staged_b(0, kStream, {.staged_b_bytes = 64});
    ASSERT_NE(staged_b.workspace(), nullptr);
    EXPECT_EQ(staged_b.workspace()->partials, nullptr);
    EXPECT_EQ(staged_b.workspace()->staged_a, nullptr);
    EXPECT_NE(staged_b.workspace()->staged_b, nullptr);
  }
  EXPECT_EQ(fake_.allocated.size(), 1u);
  EXPECT_EQ(fake_.released, allocated_backwards());
}

// A throwing allocator's exception leaves as it was, after the parts allocated before it went back.
TEST_F(LaunchScratchTest, AnAllocatorsExceptionPassesThroughAndEarlierPartsGoBack) {
  fake_.fail_at = 3;
  EXPECT_THROW(LaunchScratch(0, kStream, kStagedAndPartials), FakeFailure);
  EXPECT_EQ(fake_.allocated.size(), 2u);
  EXPECT_EQ(fake_.released, allocated_backwards());
}

TEST_F(LaunchScratchTest, NoMemoryIsAnErrorNamingThePartAndItsSize) {
  fake_.fail_at = 2;
  fake_.null = true;
  expect_error(ErrorCode::cuda_error, "the scratch allocator returned no memory for staged A (300 bytes)");
}

TEST_F(LaunchScratchTest, MisalignedMemoryIsAnErrorAndGoesBack) {
  fake_.fail_at = 1;
  fake_.misaligned = true;
  expect_error(ErrorCode::invalid_argument, "not 256-byte aligned");
  EXPECT_EQ(fake_.allocated.size(), 1u);
}

TEST(SetScratchAllocator, BothFunctionsAreRequired) {
  ScratchAllocator half{FakeAllocator::allocate, nullptr, nullptr};
  EXPECT_THROW(set_scratch_allocator(&half), Error);
  half = {nullptr, FakeAllocator::release, nullptr};
  EXPECT_THROW(set_scratch_allocator(&half), Error);
  set_scratch_allocator(nullptr);
}

}  // namespace
}  // namespace gemmkit
