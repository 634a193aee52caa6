"""gemmkit's scratch from torch's caching allocator, which gemmkit._torch installs (gemmkit/scratch.h):
a staged call's copy and a split-K call's partial sums are torch's allocations, given back when the
call returns; captured first thing by torch.cuda.graph, such calls take theirs from the allocator
(the graph's pool) and replay right; an allocator's exception reaches the caller as it was. Skips,
saying so, without torch or an sm_90 GPU."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the torch tests run on the GPU machine)")
from gpu_reference import capture, expect_close, nan_like, rand, skip_without_sm90  # noqa: E402

skip_without_sm90()

import gemmkit  # noqa: E402
from gemmkit import _gemmkit  # noqa: E402

TORCH_ALLOCATOR = (torch._C._cuda_cudaCachingAllocator_raw_alloc, torch._C._cuda_cudaCachingAllocator_raw_delete)


def staged():
    """A 150 x 1031 with rows 1033 elements apart (not a multiple of 16 bytes), too small to be
    realigned by the kernel: copied into scratch first."""
    return rand(150, 1033)[:, :1031], rand(200, 1031).t()


def split():
    """16 tokens against 2112 x 7168 weights: the cost model splits K."""
    return rand(16, 7168), rand(2112, 7168).t()


def aligned():
    """Enough tiles to fill the GPU, every operand TMA-readable: no scratch."""
    return rand(2048, 1024), rand(1024, 2048)


@pytest.fixture(autouse=True)
def cost_model_picks():
    """The cost model's plans (which split `split`), not a tuning database's."""
    before = gemmkit.tuning_mode()
    gemmkit.set_tuning_mode(gemmkit.TuningMode.off)
    yield
    gemmkit.set_tuning_mode(before)


@pytest.fixture
def allocator():
    """Sets (allocate, release) as the scratch allocator; torch's again after the test."""
    yield lambda allocate, release: _gemmkit.set_scratch_allocator(allocate, release)
    _gemmkit.set_scratch_allocator(*TORCH_ALLOCATOR)


def stats():
    return torch.cuda.memory_stats()


@pytest.mark.parametrize("operands,scratch", [(staged, True), (split, True), (aligned, False)])
def test_scratch_is_torchs_and_given_back(operands, scratch):
    a, b = operands()
    out = nan_like((a.size(0), b.size(1)), torch.bfloat16)
    gemmkit.mm(a, b, out=out)  # the first call compiles or loads the kernel
    torch.cuda.synchronize()
    before = stats()
    gemmkit.mm(a, b, out=out)
    after = stats()
    assert (after["allocation.all.allocated"] > before["allocation.all.allocated"]) == scratch
    assert after["allocation.all.current"] == before["allocation.all.current"]
    torch.cuda.synchronize()
    expect_close(out, a, b)


@pytest.mark.parametrize("operands", [staged, split])
def test_captured_calls_take_scratch_from_the_allocator_and_replay(operands, allocator):
    sizes = []

    def allocate(nbytes, stream):
        sizes.append(nbytes)
        return TORCH_ALLOCATOR[0](nbytes, stream)

    allocator(allocate, TORCH_ALLOCATOR[1])
    a, b = operands()
    uncaptured = []

    def step():
        uncaptured.append(len(sizes))
        return gemmkit.mm(a, b)

    graph, out = capture(step)
    # Without scratch the capture would run the fallback kernel, or unsplit.
    assert len(sizes) > uncaptured[-1], "the captured call allocated no scratch"
    for _ in range(2):
        a.copy_(rand(*a.shape))
        b.copy_(rand(*b.shape))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        expect_close(out, a, b)


def test_an_allocators_exception_reaches_the_caller(allocator):
    class NoScratch(Exception):
        pass

    def allocate(nbytes, stream):
        raise NoScratch(f"no {nbytes} bytes today")

    allocator(allocate, TORCH_ALLOCATOR[1])
    a, b = staged()
    with pytest.raises(NoScratch, match="no [0-9]+ bytes today"):
        gemmkit.mm(a, b)
