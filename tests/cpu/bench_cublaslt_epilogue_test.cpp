// bench's cuBLASLt-fused column, on the host: which epilogue texts match which of cuBLASLt's own
// epilogues (baseline/cublaslt_epilogue.h), and which tensors' dtypes and layouts cuBLASLt can
// fuse (CublasLt::supports with an epilogue).
#include "baseline/cublaslt_epilogue.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "epilogue/program.h"
#include "rejection.h"

// A namespace of its own: the sanitizer build compiles the CPU tests as one unit.
namespace gemmkit::baseline::cublaslt_epilogue_test {
namespace {

// Stand-in addresses, never dereferenced.
char* const kA = reinterpret_cast<char*>(uintptr_t(1) << 40);
char* const kB = reinterpret_cast<char*>(uintptr_t(2) << 40);
char* const kD = reinterpret_cast<char*>(uintptr_t(3) << 40);
char* const kBias = reinterpret_cast<char*>(uintptr_t(4) << 40);
char* const kAux = reinterpret_cast<char*>(uintptr_t(5) << 40);

std::optional<LtEpilogueMatch> match(const std::string& text) { return match_lt_epilogue(epilogue::parse(text)); }

// The kind `text` matches, with its bias and aux names, as one string: "GELU_AUX_BIAS bias=b
// aux=pre", or "none".
std::string matched(const std::string& text) {
  const std::optional<LtEpilogueMatch> m = match(text);
  if (!m) return "none";
  return std::string(lt_epilogue_name(m->kind)) + " bias=" + m->bias + " aux=" + m->aux;
}

// Texts and what each matches, as matched() says it.
void expect_matches(const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [text, want] : cases) EXPECT_EQ(matched(text), want) << text;
}

TEST(CublasLtEpilogue, EachKindMatchesWhatItComputes) {
  expect_matches({
      {"acc + bias[n]", "BIAS bias=bias aux="},
      {"relu(acc)", "RELU bias= aux="},
      {"relu(acc + bias[n])", "RELU_BIAS bias=bias aux="},
      {"gelu_tanh(acc)", "GELU bias= aux="},
      {"gelu_tanh(acc + bias[n])", "GELU_BIAS bias=bias aux="},
      {"pre[m, n] = acc; gelu_tanh(acc)", "GELU_AUX bias= aux=pre"},
      {"h = acc + bias[n]; pre[m, n] = h; gelu_tanh(h)", "GELU_AUX_BIAS bias=bias aux=pre"},
      // Backward: GELU's slope at the saved input, and the bias gradient its column sums.
      {"acc * dgelu_tanh(pre[m, n])", "DGELU bias= aux=pre"},
      {"dx = acc * dgelu_tanh(pre[m, n]); bias[n] = sum(dx); dx", "DGELU_BGRAD bias=bias aux=pre"},
  });
  EXPECT_EQ(match("relu(acc + bias[n])")->kind, CUBLASLT_EPILOGUE_RELU_BIAS);
  EXPECT_EQ(match("h = acc + bias[n]; pre[m, n] = h; gelu_tanh(h)")->kind, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  EXPECT_EQ(match("acc * dgelu_tanh(pre[m, n])")->kind, CUBLASLT_EPILOGUE_DGELU);
}

TEST(CublasLtEpilogue, SpellingDoesNotMatter) {
  // Spaces, names of values and tensors, the sum's and product's order, values written out or
  // named.
  expect_matches({
      {"  acc+b [ n ]  ", "BIAS bias=b aux="},
      {"bias[n] + acc", "BIAS bias=bias aux="},
      {"relu(b2[n] + acc)", "RELU_BIAS bias=b2 aux="},
      {"x = acc + w[n]; gelu_tanh(x)", "GELU_BIAS bias=w aux="},
      {"gelu_tanh(bias[n]+acc)", "GELU_BIAS bias=bias aux="},
      {"saved[m,n] = acc + b[n]; gelu_tanh(acc + b[n])", "GELU_AUX_BIAS bias=b aux=saved"},
      {"z = b[n] + acc; keep[m, n] = z; gelu_tanh(z)", "GELU_AUX_BIAS bias=b aux=keep"},
      {"keep[m, n] = acc; gelu_tanh(acc)", "GELU_AUX bias= aux=keep"},
      {"unused = silu(acc); relu(acc)", "RELU bias= aux="},  // values nothing stores drop out
      {"dgelu_tanh(h[m, n]) * acc", "DGELU bias= aux=h"},
      {"db[n] = sum(dgelu_tanh(x[m,n]) * acc); dgelu_tanh(x[m,n]) * acc", "DGELU_BGRAD bias=db aux=x"},
  });
}

TEST(CublasLtEpilogue, OtherProgramsMatchNothing) {
  for (const char* text : {
           "acc",                                                          // no epilogue to fuse
           "gelu(acc + bias[n])",                                          // erf's gelu, not cuBLASLt's tanh form
           "gelu(acc)",
           "silu(acc + bias[n])",                                          // no SiLU in cuBLASLt
           "acc + bias[m]",                                                // a bias along M
           "acc + bias[m, n]",                                             // a matrix
           "relu(acc) + bias[n]",                                          // the bias after the activation
           "acc - bias[n]",
           "2 * acc + bias[n]",
           "relu(acc + bias[n]) + r[m, n]",                                // a residual
           "gelu(acc + bias[n]) + r[m, n]",
           "bf16(acc + bias[n])",                                          // a cast
           "acc + bias[n] + bias[n]",
           "relu(acc + bias[n] + c[n])",
           "pre[m, n] = acc + bias[n]; relu(acc + bias[n])",               // cuBLASLt's RELU_AUX stores a bit mask
           "pre[m, n] = gelu_tanh(acc + bias[n]); gelu_tanh(acc + bias[n])",  // the activation stored, not its input
           "pre[m, n] = acc; gelu_tanh(acc + bias[n])",                    // aux without the bias
           "h = acc + bias[n]; pre[m, n] = h; q[m, n] = h; gelu_tanh(h)",  // two outputs
           "acc * dgelu(pre[m, n])",                                       // erf's slope
           "acc * dsilu(pre[m, n])",
           "dgelu_tanh(acc)",
           "acc * dgelu_tanh(pre[n])",
           "dx = acc * dgelu_tanh(pre[m, n]); bias[n] = amax(dx); dx",     // not a sum
           "dx = acc * dgelu_tanh(pre[m, n]); bias[m] = sum(dx); dx",      // over the rows
           "dx = acc * dgelu_tanh(pre[m, n]); bias[n] = sum(acc); dx",     // of the product alone
           "silu(acc) * acc2",                                             // a dual GEMM
           "relu(acc2)",
       }) {
    EXPECT_EQ(matched(text), "none") << text;
  }
}

TEST(CublasLtEpilogue, NamesAreCublasLtsWithoutThePrefix) {
  EXPECT_EQ(lt_epilogue_name(CUBLASLT_EPILOGUE_BIAS), "BIAS");
  EXPECT_EQ(lt_epilogue_name(CUBLASLT_EPILOGUE_RELU_BIAS), "RELU_BIAS");
  EXPECT_EQ(lt_epilogue_name(CUBLASLT_EPILOGUE_GELU_AUX), "GELU_AUX");
  EXPECT_EQ(lt_epilogue_name(CUBLASLT_EPILOGUE_GELU_AUX_BIAS), "GELU_AUX_BIAS");
  EXPECT_EQ(lt_epilogue_name(CUBLASLT_EPILOGUE_DGELU_BGRAD), "DGELU_BGRAD");
  EXPECT_EQ(lt_epilogue_name(CUBLASLT_EPILOGUE_DEFAULT), "DEFAULT");
}

TEST(CublasLtEpilogue, BindsTheTextsTensorsByName) {
  const int64_t m = 64, n = 96;
  Epilogue e{"h = acc + b[n]; saved[m, n] = h; gelu_tanh(h)",
             {{"saved", TensorView::row_major(kAux, DType::bf16, m, n)},
              {"b", TensorView::batched(kBias, DType::bf16, 2, 1, n, n, n, 1)}}};
  const std::optional<LtEpilogue> lt = lt_epilogue(e);
  ASSERT_TRUE(lt);
  EXPECT_EQ(lt->kind, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  EXPECT_EQ(lt->bias.data, kBias);
  EXPECT_EQ(lt->bias.dtype, DType::bf16);
  EXPECT_EQ(lt->bias.batch_stride, n);
  EXPECT_EQ(lt->bias.col_stride, 1);
  EXPECT_EQ(lt->aux.data, kAux);
  EXPECT_EQ(lt->aux.batch_stride, 0);
  EXPECT_EQ(lt->aux.row_stride, n);
  EXPECT_EQ(lt->aux.col_stride, 1);

  e.text = "relu(acc)";  // no tensors
  ASSERT_TRUE(lt_epilogue(e));
  EXPECT_EQ(lt_epilogue(e)->kind, CUBLASLT_EPILOGUE_RELU);
  EXPECT_EQ(lt_epilogue(e)->bias.data, nullptr);
  EXPECT_EQ(lt_epilogue(e)->aux.data, nullptr);
  e.text = "silu(acc + b[n])";
  EXPECT_FALSE(lt_epilogue(e));
  e.text = "";
  EXPECT_FALSE(lt_epilogue(e));
  e.text = "gelu_tanh(acc + missing[n])";
  testing::expect_invalid_argument([&] { lt_epilogue(e); }, "epilogue", {"'missing'"});
}

// A bf16 (or `in`) GEMM, A row-major M x K, B stored N x K (NT), D row-major or column-major.
Problem problem(int64_t m, int64_t n, int64_t k, bool d_row_major = true, DType in = DType::bf16, DType out = DType::bf16) {
  Problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = {kA, in, 0, k, 1};
  p.b = {kB, in, 0, 1, k};
  p.d = d_row_major ? MatrixRef{kD, out, 0, n, 1} : MatrixRef{kD, out, 0, 1, m};
  return p;
}

MatrixRef bias(DType dtype = DType::bf16, int64_t stride = 1) { return {kBias, dtype, 0, 0, stride}; }
MatrixRef aux(int64_t row_stride, int64_t col_stride, DType dtype = DType::bf16) {
  return {kAux, dtype, 0, row_stride, col_stride};
}

// supports(p, e) and its reason.
std::string declined(const Problem& p, const LtEpilogue& e) {
  std::string why;
  return CublasLt::supports(p, e, &why) ? "supported" : why;
}

TEST(CublasLtEpilogue, BiasNeedsDRowMajorOfItsTypeAndContiguous) {
  const Problem p = problem(256, 384, 512);
  ASSERT_TRUE(CublasLt::supports(p));
  EXPECT_EQ(declined(p, {CUBLASLT_EPILOGUE_BIAS, bias(), {}}), "supported");
  EXPECT_EQ(declined(p, {CUBLASLT_EPILOGUE_GELU_BIAS, bias(), {}}), "supported");
  EXPECT_EQ(declined(p, {CUBLASLT_EPILOGUE_RELU, {}, {}}), "supported");
  EXPECT_EQ(declined(p, {CUBLASLT_EPILOGUE_DEFAULT, {}, {}}), "supported");
  // One row: D reads as D^T whichever way, so the bias runs along cuBLASLt's rows.
  EXPECT_EQ(declined(problem(1, 384, 512), {CUBLASLT_EPILOGUE_BIAS, bias(), {}}), "supported");
  EXPECT_EQ(declined(problem(1, 384, 512, /*d_row_major=*/false), {CUBLASLT_EPILOGUE_BIAS, bias(), {}}), "supported");

  const Problem column_major_d = problem(256, 384, 512, /*d_row_major=*/false);
  ASSERT_TRUE(CublasLt::supports(column_major_d));
  EXPECT_NE(declined(column_major_d, {CUBLASLT_EPILOGUE_BIAS, bias(), {}}).find("D column-major"), std::string::npos);
  EXPECT_EQ(declined(column_major_d, {CUBLASLT_EPILOGUE_GELU, {}, {}}), "supported");  // no bias, any D
  EXPECT_NE(declined(p, {CUBLASLT_EPILOGUE_BIAS, bias(DType::f32), {}}).find("bias must have D's dtype"), std::string::npos);
  EXPECT_NE(declined(p, {CUBLASLT_EPILOGUE_BIAS, bias(DType::bf16, 2), {}}).find("contiguous"), std::string::npos);
  EXPECT_NE(declined(p, {CUBLASLT_EPILOGUE_BIAS, {}, {}}).find("without its bias"), std::string::npos);
  EXPECT_NE(declined(p, {CUBLASLT_EPILOGUE_RELU, bias(), {}}).find("a bias it does not take"), std::string::npos);
  // An f32 D takes an f32 bias, except after an FP8 product (cuBLASLt's bias is bf16 there).
  EXPECT_EQ(declined(problem(256, 384, 512, true, DType::bf16, DType::f32), {CUBLASLT_EPILOGUE_BIAS, bias(DType::f32), {}}),
            "supported");
  const Problem fp8 = problem(256, 384, 512, true, DType::e4m3, DType::f32);
  ASSERT_TRUE(CublasLt::supports(fp8));
  EXPECT_NE(declined(fp8, {CUBLASLT_EPILOGUE_BIAS, bias(DType::f32), {}}).find("FP8"), std::string::npos);
  EXPECT_EQ(declined(problem(256, 384, 512, true, DType::e4m3, DType::bf16), {CUBLASLT_EPILOGUE_BIAS, bias(), {}}),
            "supported");
  // The GEMM's own reasons come first.
  Problem unsupported = p;
  unsupported.d.dtype = DType::f16;
  EXPECT_FALSE(CublasLt::supports(unsupported, {CUBLASLT_EPILOGUE_BIAS, bias(DType::f16), {}}));
}

TEST(CublasLtEpilogue, AuxIsLaidOutLikeDOfItsTypeInMultiplesOf8) {
  const Problem p = problem(256, 384, 512);
  EXPECT_EQ(declined(p, {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias(), aux(384, 1)}), "supported");
  EXPECT_EQ(declined(p, {CUBLASLT_EPILOGUE_GELU_AUX, {}, aux(392, 1)}), "supported");  // a padded row
  EXPECT_NE(declined(p, {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias(), aux(1, 256)}).find("laid out like D"), std::string::npos);
  EXPECT_NE(declined(p, {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias(), aux(388, 1)}).find("multiples of 8"), std::string::npos);
  EXPECT_NE(declined(p, {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias(), aux(384, 1, DType::f32)}).find("aux must have D's dtype"),
            std::string::npos);
  EXPECT_NE(declined(p, {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias(), {}}).find("without its aux"), std::string::npos);
  EXPECT_NE(declined(p, {CUBLASLT_EPILOGUE_GELU_BIAS, bias(), aux(384, 1)}).find("an aux matrix it does not take"),
            std::string::npos);
  // Column-major D, column-major aux: GELU_AUX (no bias) runs as D is.
  const Problem column_major_d = problem(256, 384, 512, /*d_row_major=*/false);
  EXPECT_EQ(declined(column_major_d, {CUBLASLT_EPILOGUE_GELU_AUX, {}, aux(1, 256)}), "supported");
  EXPECT_NE(declined(column_major_d, {CUBLASLT_EPILOGUE_GELU_AUX, {}, aux(384, 1)}).find("laid out like D"), std::string::npos);
  // A batch steps aux by a multiple of 8 elements.
  Problem batched = p;
  batched.batch = 2;
  batched.a.batch_stride = 256 * 512;
  batched.b.batch_stride = 384 * 512;
  batched.d.batch_stride = 256 * 384;
  MatrixRef stepped = aux(384, 1);
  stepped.batch_stride = 256 * 384;
  EXPECT_EQ(declined(batched, {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias(), stepped}), "supported");
  stepped.batch_stride = 256 * 384 + 4;
  EXPECT_NE(declined(batched, {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias(), stepped}).find("multiples of 8"), std::string::npos);
}

TEST(CublasLtEpilogue, BackwardReadsAuxAndWritesTheBiasGradientOfDsType) {
  const Problem p = problem(256, 384, 512);
  EXPECT_EQ(declined(p, {CUBLASLT_EPILOGUE_DGELU, {}, aux(384, 1)}), "supported");
  EXPECT_NE(declined(p, {CUBLASLT_EPILOGUE_DGELU, {}, aux(1, 256)}).find("laid out like D"), std::string::npos);
  EXPECT_EQ(declined(p, {CUBLASLT_EPILOGUE_DGELU_BGRAD, bias(), aux(384, 1)}), "supported");
  // Our column sums are f32: a gradient may be f32 whatever D is (a bias read may not).
  EXPECT_EQ(declined(p, {CUBLASLT_EPILOGUE_DGELU_BGRAD, bias(DType::f32), aux(384, 1)}), "supported");
  EXPECT_NE(declined(p, {CUBLASLT_EPILOGUE_DGELU_BGRAD, bias(DType::f16), aux(384, 1)}).find("D's dtype or be f32"),
            std::string::npos);
  EXPECT_NE(declined(p, {CUBLASLT_EPILOGUE_GELU_BIAS, bias(DType::f32), {}}).find("bias must have D's dtype"),
            std::string::npos);
  EXPECT_EQ(declined(problem(256, 384, 512, true, DType::bf16, DType::f32),
                     {CUBLASLT_EPILOGUE_DGELU_BGRAD, bias(DType::f32), aux(384, 1, DType::f32)}),
            "supported");
  EXPECT_NE(declined(problem(256, 384, 512, false), {CUBLASLT_EPILOGUE_DGELU_BGRAD, bias(), aux(1, 256)}).find("D column-major"),
            std::string::npos);
}

TEST(CublasLtEpilogue, KindsTheBaselineDoesNotRunAreDeclined) {
  const Problem p = problem(256, 384, 512);
  for (cublasLtEpilogue_t kind : {CUBLASLT_EPILOGUE_RELU_AUX, CUBLASLT_EPILOGUE_DRELU_BGRAD, CUBLASLT_EPILOGUE_DRELU,
                                  CUBLASLT_EPILOGUE_BGRADB}) {
    EXPECT_NE(declined(p, {kind, {}, {}}).find("epilogue kind"), std::string::npos) << kind;
  }
}

}  // namespace
}  // namespace gemmkit::baseline::cublaslt_epilogue_test
