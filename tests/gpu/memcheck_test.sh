#!/bin/sh
# compute-sanitizer's memcheck over the grouped tests whose sizes end early, are clamped or give
# empty groups: no access outside any allocation, whatever the sizes (issue 46). Skips (77)
# without compute-sanitizer, and where the GPU tests skip (no sm_90 device).
set -u
tests=$1
sanitizer=$2
[ -x "$sanitizer" ] || { echo "compute-sanitizer not found"; exit 77; }
filter='GroupedGemm.OutOfRangeEndsAreClamped:GroupedGemm.MaskedWithInt64Counts:GroupedGemm.WeightGradientWithEmptyAndOddGroups'
out=$("$sanitizer" --tool memcheck --error-exitcode 3 "$tests" --gtest_filter="$filter" 2>&1)
status=$?
echo "$out"
if echo "$out" | grep -q "GPU test skipped"; then exit 77; fi
[ $status -eq 0 ] && echo "$out" | grep -q "ERROR SUMMARY: 0 errors" && echo "$out" | grep -q "PASSED  \] 3 tests" ||
  { echo "FAIL: memcheck found errors, or the tests did not all pass"; exit 1; }
echo PASS
