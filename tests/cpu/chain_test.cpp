#include "bench/chain.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <sstream>
#include <tuple>

#include "gemmkit/error.h"

using gemmkit::DType;
using gemmkit::Error;
using gemmkit::ErrorCode;
using namespace gemmkit::tools;

namespace {

Chain parse(const std::string& text) {
  std::istringstream in(text);
  return parse_chain(in, "chain.txt");
}

// The message of the gemmkit::Error that `run` throws, which must have `code` ("" if none).
std::string error_of(const std::function<void()>& run, ErrorCode code) {
  try {
    run();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// The message of the invalid_argument error that parsing `text` throws ("" if none).
std::string error_of(const std::string& text) {
  return error_of([&] { parse(text); }, ErrorCode::invalid_argument);
}

TEST(Chain, LinesAreSuiteLinesAndOneLayerByDefault) {
  const Chain c = parse("# a comment\n1 1280 8192 NT bf16  # qkv\n\n1 8192 1024\n");
  EXPECT_EQ(c.name, "chain.txt");
  EXPECT_EQ(c.layers, 1);
  ASSERT_EQ(c.layer.size(), 2u);
  EXPECT_EQ(std::tie(c.layer[0].m, c.layer[0].n, c.layer[0].k), std::make_tuple(1, 1280, 8192));
  EXPECT_EQ(c.layer[0].line, 2);
  EXPECT_EQ(c.layer[1].layout, "NT");  // the suite's defaults
  EXPECT_EQ(c.layer[1].in_dtype, DType::bf16);
  EXPECT_EQ(c.layer[1].line, 4);
}

TEST(Chain, LayersDirectiveMayStandAnywhere) {
  EXPECT_EQ(parse("layers 4\n1 2 3\n").layers, 4);
  const Chain c = parse("1 2 3\n4 5 6\n  layers\t80  # Llama-3-70B\n");
  EXPECT_EQ(c.layers, 80);
  EXPECT_EQ(c.layer.size(), 2u);  // the directive is no GEMM
  EXPECT_EQ(parse("layers " + std::to_string(kMaxChainLayers) + "\n1 2 3\n").layers, kMaxChainLayers);
}

TEST(Chain, BadLayersLinesNameTheLineAndWhatWasExpected) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"layers 0", "too small"},
      {"layers -2", "too small"},
      {"layers four", "not an integer"},
      {"layers 4.5", "not an integer"},
      {"layers", "expected 'layers N'"},
      {"layers 4 8", "expected 'layers N'"},
      {"layers " + std::to_string(kMaxChainLayers + 1), "too large"},
  };
  for (const auto& [line, why] : cases) {
    SCOPED_TRACE(line);
    const std::string msg = error_of("1 2 3\n" + line + "\n");
    EXPECT_EQ(msg.rfind("chain.txt:2: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(why), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
  }
}

TEST(Chain, SecondLayersLineIsAnError) {
  const std::string msg = error_of("layers 2\n1 2 3\nlayers 2\n");
  EXPECT_EQ(msg.rfind("chain.txt:3: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("second 'layers' line"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 1"), std::string::npos) << msg;
}

TEST(Chain, ChainWithoutGemmsIsAnError) {
  for (const std::string text : {"", "# nothing\n\n", "layers 4\n"}) {
    SCOPED_TRACE(text);
    const std::string msg = error_of(text);
    EXPECT_EQ(msg.rfind("chain.txt: no GEMMs", 0), 0u) << msg;
  }
}

TEST(Chain, BadGemmLinesFailAsInSuites) {
  const std::string msg = error_of("layers 2\n1 2 x\n");
  EXPECT_EQ(msg.rfind("chain.txt:2: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("'x'"), std::string::npos) << msg;
}

TEST(Chain, LoadReportsUnreadableFilesAsIoErrors) {
  for (const std::string path : {"/nonexistent/chain.txt", GEMMKIT_SOURCE_DIR "/bench/chains"}) {
    SCOPED_TRACE(path);
    const std::string msg = error_of([&] { load_chain(path); }, ErrorCode::io_error);
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
}

TEST(Chain, LayerGemmsJoinTheChainsLayers) {
  const std::vector<Chain> chains = {parse("layers 4\n1 2 3\n4 5 6\n"), parse("7 8 9\n")};
  const std::vector<SuiteProblem> gemms = layer_gemms(chains);
  ASSERT_EQ(gemms.size(), 3u);
  EXPECT_EQ(gemms[1].m, 4);
  EXPECT_EQ(gemms[2].m, 7);
}

// The shipped chains: one decoder layer of each model over 4 layers, at M = 1, 8, 32 and 128.
TEST(Chain, ShippedChainsParse) {
  using Gemm = std::tuple<int64_t, int64_t>;  // N, K
  const std::vector<std::pair<std::string, std::vector<Gemm>>> models = {
      {"llama3-70b-tp8", {{1280, 8192}, {8192, 1024}, {7168, 8192}, {8192, 3584}}},
      {"llama3-8b", {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}}},
  };
  const std::filesystem::path dir = GEMMKIT_SOURCE_DIR "/bench/chains";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(load_chain(entry.path().string()));  // every file there, these and any added later
  }
  for (const auto& [model, layer] : models) {
    for (int64_t m : {1, 8, 32, 128}) {
      const std::string file = model + "-m" + std::to_string(m) + ".txt";
      SCOPED_TRACE(file);
      const Chain c = load_chain((dir / file).string());
      EXPECT_EQ(c.layers, 4);
      std::vector<Gemm> got;
      for (const SuiteProblem& p : c.layer) {
        got.push_back({p.n, p.k});
        EXPECT_EQ(p.m, m);
        EXPECT_EQ(p.layout, "NT");
        EXPECT_EQ(dtype_spec(p), "bf16");
        EXPECT_EQ(p.batch, 1);
      }
      EXPECT_EQ(got, layer);
    }
  }
}

}  // namespace
