#include "bench/suite.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <tuple>

#include "gemmkit/error.h"

#ifndef GEMMKIT_SOURCE_DIR
#error "GEMMKIT_SOURCE_DIR must name the repository root"
#endif

using gemmkit::DType;
using gemmkit::Error;
using gemmkit::ErrorCode;
using namespace gemmkit::tools;

namespace {

std::vector<SuiteProblem> parse(const std::string& text) {
  std::istringstream in(text);
  return parse_suite(in, "test.txt");
}

TEST(Suite, DefaultsApplyWhenOnlyShapeIsGiven) {
  auto p = parse("4096 2112 7168\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].m, 4096);
  EXPECT_EQ(p[0].n, 2112);
  EXPECT_EQ(p[0].k, 7168);
  EXPECT_EQ(p[0].layout, "NT");
  EXPECT_EQ(p[0].in_dtype, DType::bf16);
  EXPECT_EQ(p[0].out_dtype, DType::bf16);
  EXPECT_EQ(p[0].batch, 1);
  EXPECT_EQ(p[0].line, 1);
}

TEST(Suite, ParsesEveryField) {
  auto p = parse("1 2 3 tn f16:f32 4\n5 6 7 Tt f16\n");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(std::tie(p[0].m, p[0].n, p[0].k, p[0].batch), std::make_tuple(1, 2, 3, 4));
  EXPECT_EQ(p[0].layout, "TN");  // stored upper-case
  EXPECT_EQ(p[0].in_dtype, DType::f16);
  EXPECT_EQ(p[0].out_dtype, DType::f32);
  EXPECT_EQ(p[1].layout, "TT");
  EXPECT_EQ(p[1].in_dtype, DType::f16);
  EXPECT_EQ(p[1].out_dtype, DType::f16);  // "f16" alone means out = in
  EXPECT_EQ(p[1].batch, 1);
}

TEST(Suite, SixteenBitInputsHaveNoModeAndTheSixthFieldIsTheBatch) {
  auto p = parse("1 2 3 NT bf16 4\n1 2 3 NT bf16\n");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].batch, 4);
  for (const auto& q : p) {
    EXPECT_EQ(q.mode, gemmkit::ScaleMode::none);
    EXPECT_FALSE(q.in_b.has_value());
    EXPECT_FALSE(q.fp8());
  }
}

TEST(Suite, AcceptsUsualSpellingsInAnyCase) {
  const std::vector<std::tuple<std::string, DType, DType>> cases = {
      {"fp16", DType::f16, DType::f16},
      {"float16", DType::f16, DType::f16},
      {"bfloat16", DType::bf16, DType::bf16},
      {"BFloat16:Float32", DType::bf16, DType::f32},
      {"FP16:fp32", DType::f16, DType::f32},
      {"bf16:float16", DType::bf16, DType::f16},
      {"E4M3:FP32", DType::e4m3, DType::f32},
      {"e5m2:bfloat16", DType::e5m2, DType::bf16},
  };
  for (const auto& [given, in, out] : cases) {
    SCOPED_TRACE(given);
    const SuiteProblem p = parse("1 1 1 NT " + given).at(0);
    EXPECT_EQ(p.in_dtype, in);
    EXPECT_EQ(p.out_dtype, out);
  }
}

TEST(Suite, ParsesFp8DtypesModesAndBatches) {
  using gemmkit::ScaleMode;
  auto p = parse(
      "1 2 3 NT e4m3\n"                    // 0: output bf16, mode tensor
      "1 2 3 NT e4m3:f32 rowwise\n"        // 1
      "1 2 3 NT e4m3:bf16 block 2\n"       // 2: block, batch 2
      "1 2 3 NT e5m2:f16 3\n"              // 3: a number after the dtype is the batch
      "1 2 3 NT e4m3,e5m2 MX\n"            // 4: two 8-bit types, mode in any case
      "1 2 3 TN E5M2,E4M3:F32 Tensor 7\n"  // 5
      "1 2 3 NT e4m3,e4m3:bf16\n");        // 6: the same type twice is one type
  ASSERT_EQ(p.size(), 7u);
  for (const auto& q : p) EXPECT_TRUE(q.fp8());

  EXPECT_EQ(p[0].in_dtype, DType::e4m3);
  EXPECT_FALSE(p[0].in_b.has_value());
  EXPECT_EQ(p[0].b_dtype(), DType::e4m3);
  EXPECT_EQ(p[0].out_dtype, DType::bf16);
  EXPECT_EQ(p[0].mode, ScaleMode::tensor);
  EXPECT_EQ(p[0].batch, 1);

  EXPECT_EQ(p[1].out_dtype, DType::f32);
  EXPECT_EQ(p[1].mode, ScaleMode::rowwise);
  EXPECT_EQ(p[1].batch, 1);

  EXPECT_EQ(p[2].mode, ScaleMode::block);
  EXPECT_EQ(p[2].batch, 2);

  EXPECT_EQ(p[3].in_dtype, DType::e5m2);
  EXPECT_EQ(p[3].out_dtype, DType::f16);
  EXPECT_EQ(p[3].mode, ScaleMode::tensor);
  EXPECT_EQ(p[3].batch, 3);

  EXPECT_EQ(p[4].in_dtype, DType::e4m3);
  EXPECT_EQ(p[4].in_b, DType::e5m2);
  EXPECT_EQ(p[4].b_dtype(), DType::e5m2);
  EXPECT_EQ(p[4].out_dtype, DType::bf16);
  EXPECT_EQ(p[4].mode, ScaleMode::mx);

  EXPECT_EQ(p[5].layout, "TN");
  EXPECT_EQ(p[5].in_dtype, DType::e5m2);
  EXPECT_EQ(p[5].in_b, DType::e4m3);
  EXPECT_EQ(p[5].out_dtype, DType::f32);
  EXPECT_EQ(p[5].mode, ScaleMode::tensor);
  EXPECT_EQ(p[5].batch, 7);

  EXPECT_EQ(p[6].in_dtype, DType::e4m3);
  EXPECT_FALSE(p[6].in_b.has_value());

  // The command-line form takes the same fields.
  const SuiteProblem q = parse_problem({"64", "7168", "2048", "nt", "e4m3:bf16", "block"}, "command line");
  EXPECT_EQ(q.mode, ScaleMode::block);
  EXPECT_EQ(q.batch, 1);
}

TEST(Suite, SkipsCommentsAndBlankLinesAndKeepsLineNumbers) {
  auto p = parse("# header\n\n  \t \n1 2 3 # trailing comment\n\t4\t5 \t6 NN#tight\r\n# end");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].line, 4);
  EXPECT_EQ(p[0].m, 1);
  EXPECT_EQ(p[1].line, 5);
  EXPECT_EQ(std::tie(p[1].m, p[1].n, p[1].k), std::make_tuple(4, 5, 6));
  EXPECT_EQ(p[1].layout, "NN");
  EXPECT_TRUE(parse("").empty());
  EXPECT_TRUE(parse("# only a comment\n").empty());
}

TEST(Suite, AcceptsZeroSizesAnd64BitValues) {
  auto p = parse("0 0 0\n9000000000 1 1 NT bf16 300000000\n");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(std::tie(p[0].m, p[0].n, p[0].k), std::make_tuple(0, 0, 0));
  EXPECT_EQ(p[1].m, 9000000000LL);
  EXPECT_EQ(p[1].batch, 300000000LL);
}

TEST(Suite, RejectsProblemsPastSixtyFourBitAddressing) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"4294967296 4294967296 8 NT bf16",
       "test.txt:2: problem 4294967296 x 4294967296 x 8: M x N = 2^64 elements overflows 64-bit addressing"},
      {"4294967296 1 2147483648 NN bf16 2",
       "test.txt:2: problem 4294967296 x 1 x 2147483648 (batch 2): M x K = 2^63 elements overflows 64-bit "
       "addressing"},
      {"9000000000 1 1 NT bf16 3000000000",
       "test.txt:2: problem 9000000000 x 1 x 1 (batch 3000000000): batch x M x K = 27000000000000000000 elements "
       "overflows 64-bit addressing"},
      {"1 1 4611686018427387904 NT e4m3:f32",  // 2^62 one-byte elements, but D is f32
       "test.txt:2: problem 1 x 1 x 4611686018427387904: K x 4 bytes = 2^64 bytes overflows 64-bit addressing"},
  };
  for (const auto& [line, message] : cases) {
    SCOPED_TRACE(line);
    try {
      parse("1 1 1\n" + line + "\n");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
  try {
    parse_problem({"4294967296", "4294967296", "8"}, "command line");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("command line: problem 4294967296 x 4294967296 x 8: M x N", 0), 0u) << e.what();
  }
  EXPECT_EQ(parse("1 1 4611686018427387903 NT e4m3:bf16\n").at(0).k, 4611686018427387903LL) << "just within";
}

// Each bad line sits on line 3, after a comment and a good line, so the line number is checked.
TEST(Suite, RejectsMalformedLinesNamingFileLineAndText) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"-1 2 3", "'-1'"},
      {"1 -2 3", "'-2'"},
      {"1 2 -3", "'-3'"},
      {"12x 2 3", "'12x'"},
      {"abc 2 3", "'abc'"},
      {"1.5 2 3", "'1.5'"},
      {"1 2 0x10", "'0x10'"},
      {"99999999999999999999 1 1", "'99999999999999999999'"},
      {"1 2", "'1 2'"},
      {"1 2 3 NT bf16 1 9", "'1 2 3 NT bf16 1 9'"},
      {"1 2 3 XY", "'XY'"},
      {"1 2 3 N", "'N'"},
      {"1 2 3 bf16", "'bf16'"},   // fields are positional: the fourth is the layout
      {"1 2 3 NT f32", "'f32'"},  // inputs must be 16-bit
      {"1 2 3 NT f32:f32", "'f32:f32'"},
      {"1 2 3 NT bf16:f8", "'bf16:f8'"},
      {"1 2 3 NT bf16:", "'bf16:'"},
      {"1 2 3 NT bf16 0", "'0'"},
      {"1 2 3 NT bf16 -2", "'-2'"},
      {"1 2 3 NT bf16 2x", "'2x'"},
      {"1 2 3 NT ue8m0", "'ue8m0'"},  // a scale type, not an input
      {"1 2 3 NT e4m3:", "'e4m3:'"},
      {"1 2 3 NT e4m3:e5m2", "'e4m3:e5m2'"},  // outputs are 16- or 32-bit
      {"1 2 3 NT e4m3,bf16", "'e4m3,bf16'"},  // two input types only where both are 8-bit
      {"1 2 3 NT bf16,f16:f32", "'bf16,f16:f32'"},
      {"1 2 3 NT e4m3,", "'e4m3,'"},
      {"1 2 3 NT e4m3,e5m2,e4m3", "'e4m3,e5m2,e4m3'"},
      {"1 2 3 NT fp8", "'fp8'"},
      {"1 2 3 NT bf16 block", "'block'"},  // a mode only with FP8 inputs
      {"1 2 3 NT f16:f32 tensor 2", "'tensor'"},
      {"1 2 3 NT e4m3:bf16 blocky", "'blocky'"},
      {"1 2 3 NT e4m3:bf16 none", "'none'"},
      {"1 2 3 NT e4m3:bf16 2 block", "'2'"},  // the mode comes before the batch
      {"1 2 3 NT e4m3:bf16 block 0", "'0'"},
      {"1 2 3 NT e4m3:bf16 -3", "'-3'"},
      {"1 2 3 NT e4m3:bf16 2x", "'2x'"},
      {"1 2 3 NT e4m3:bf16 block 2 3", "'1 2 3 NT e4m3:bf16 block 2 3'"},
      // 4-bit weights
      {"1 2 3 NT bf16,w4", "'bf16,w4'"},
      {"1 2 3 NT w4:int4g128", "'w4:int4g128'"},
      {"1 2 3 NT e5m2,w4:int4g128", "'e5m2'"},
      {"1 2 3 NT e4m3,w4:int4g128 mx", "'mx'"},
      {"1 2 4096 NT e4m3,w4:int4g64z mx 2", "'mx'"},  // mx only against weights in groups of 32
      {"1 2 3 NT e4m3,w4:int4g128 rows", "'rows'"},
      {"1 2 3 NT e4m3,w4:int4g128 2 3", "'2'"},  // the mode comes before the batch
      {"1 2 3 NT e4m3,w4:int4g128 rowwise 2 3", "'1 2 3 NT e4m3,w4:int4g128 rowwise 2 3'"},
      {"1 2 3 NT bf16,w4:", "''"},
      {"1 2 3 NT bf16,w4:int4", "'int4'"},
      {"1 2 3 NT bf16,w4:int4g", "''"},
      {"1 2 3 NT bf16,w4:int4g96", "'96'"},
      {"1 2 3 NT bf16,w4:mxfp4z", "'mxfp4z'"},
      {"1 2 3 NT bf16,w4:mxfp4:e4m3", "'e4m3'"},
      {"1 2 3 NN bf16,w4:int4g128", "'NN'"},
      {"1 2 3 NT bf16,w4:mxfp4 mx", "'mx'"},
      {"1 2 3 NT bf16,w4:int4g128 group 2", "'group'"},
      {"1 2 3 NT bf16,w4:int4g128 2 3", "'1 2 3 NT bf16,w4:int4g128 2 3'"},
  };
  for (const auto& [line, given] : cases) {
    SCOPED_TRACE(line);
    std::istringstream in("# comment\n1 1 1\n" + line + "\n4 4 4\n");
    try {
      parse_suite(in, "bad.txt");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("bad.txt:3: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(given), std::string::npos) << msg;
      EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
    }
  }
}

// The message of the error that parsing `text` (one bad line, line 1) gives.
std::string parse_error(const std::string& text) {
  try {
    parse(text);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    return e.what();
  }
  return "";
}

TEST(Suite, QuotesAtMostEightyBytesOfALineEscaped) {
  std::string many_fields;
  while (many_fields.size() < (2u << 20)) many_fields += "1 ";
  EXPECT_EQ(parse_error(many_fields),
            "test.txt:1: expected 3 to 7 fields (M N K [layout] [dtype] [mode] [batch]), got 1048576: '" +
                many_fields.substr(0, 80) + "...'");
  const std::string long_field(2u << 20, '7');
  EXPECT_EQ(parse_error(long_field + " 1 1"),
            "test.txt:1: M '" + long_field.substr(0, 80) + "...' is out of range; expected a 64-bit integer");
  EXPECT_EQ(parse_error("1 1 1 " + std::string(81, 'N')),
            "test.txt:1: unknown layout '" + std::string(80, 'N') + "...'; expected NN, NT, TN or TT");
  EXPECT_EQ(parse_error("1 1 1 " + std::string(80, 'N')),
            "test.txt:1: unknown layout '" + std::string(80, 'N') + "'; expected NN, NT, TN or TT")
      << "80 bytes are not cut";

  // Control bytes, bytes past ASCII and backslashes are escaped: the message is printable.
  EXPECT_EQ(parse_error("1 1 1 N\x1b[2JT"), "test.txt:1: unknown layout 'N\\x1b[2JT'; expected NN, NT, TN or TT");
  EXPECT_EQ(parse_error("1 1 1 NT bf16\xc3\xa9"),
            "test.txt:1: unknown dtype 'bf16\\xc3\\xa9'; expected IN or IN:OUT with IN bf16, f16, e4m3, e5m2, two "
            "8-bit types A,B (e.g. e4m3,e5m2) or A,w4:FORMAT (4-bit weights, e.g. bf16,w4:int4g128) and OUT bf16, "
            "f16, f32 or e4m3 (quantised in 1x128 blocks)");
  EXPECT_EQ(parse_error("1 1 1 N\\T"), "test.txt:1: unknown layout 'N\\\\T'; expected NN, NT, TN or TT");
  EXPECT_EQ(parse_error("1 1 1 NT e4m3 \x7f"),
            "test.txt:1: unknown scaling mode '\\x7f'; expected tensor, rowwise, block or mx (or a batch)");
  using namespace std::string_literals;
  std::string binary;
  for (int i = 0; i < 200; ++i) binary += char(i % 32 == 10 ? 1 : i % 32);  // no newline, no blank
  const std::string message = parse_error("1 1 1 NT bf16 2" + binary);
  EXPECT_EQ(message.find_first_of("\0\x01\x1f\x7f"s), std::string::npos) << message;
  EXPECT_LT(message.size(), 400u) << message;
}

TEST(Suite, ANulInAFieldGetsTheFieldsReason) {
  using namespace std::string_literals;
  EXPECT_EQ(parse_error("12\0 2 3"s),
            "test.txt:1: M '12\\x00' is not an integer; expected an integer >= 0");
  EXPECT_EQ(parse_error("1 2 3 NT\0"s), "test.txt:1: unknown layout 'NT\\x00'; expected NN, NT, TN or TT");
  EXPECT_EQ(parse_error("1 2 3 NT bf16 \0002"s),
            "test.txt:1: batch '\\x002' is not an integer; expected an integer >= 1");
}

TEST(Suite, LoadReportsUnreadableFileAsIoError) {
  const std::string path = "/nonexistent/dir/suite.txt";
  try {
    load_suite(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(Suite, LoadReportsDirectoryAsIoError) {
  try {
    load_suite(GEMMKIT_SOURCE_DIR "/bench/suites");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error);
    EXPECT_NE(std::string(e.what()).find("bench/suites"), std::string::npos) << e.what();
  }
}

TEST(Suite, ParseProblemTakesTheCommandLineForm) {
  SuiteProblem p = parse_problem({"4096", "4096", "4096"}, "command line");
  EXPECT_EQ(std::tie(p.m, p.n, p.k, p.batch), std::make_tuple(4096, 4096, 4096, 1));
  EXPECT_EQ(p.layout, "NT");
  EXPECT_EQ(p.line, 0);
  p = parse_problem({"1", "2", "3", "nn", "bf16:f16", "8"}, "command line");
  EXPECT_EQ(std::tie(p.m, p.n, p.k, p.batch), std::make_tuple(1, 2, 3, 8));
  EXPECT_EQ(p.layout, "NN");
  EXPECT_EQ(p.in_dtype, DType::bf16);
  EXPECT_EQ(p.out_dtype, DType::f16);
  try {
    parse_problem({"1", "2", "x"}, "command line");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("command line: ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
}

TEST(Suite, DtypeSpecRoundTrips) {
  // 16-bit specs name the output only where it differs; FP8 specs always name it.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bf16", "bf16"},         {"f16", "f16"},           {"bf16:bf16", "bf16"},
      {"bf16:f16", "bf16:f16"}, {"bf16:f32", "bf16:f32"}, {"f16:bf16", "f16:bf16"},
      {"f16:f16", "f16"},       {"f16:f32", "f16:f32"},   {"BF16:F32", "bf16:f32"},
      {"e4m3", "e4m3:bf16"},           {"e5m2", "e5m2:bf16"},           {"e4m3:bf16", "e4m3:bf16"},
      {"e4m3:f16", "e4m3:f16"},        {"e5m2:f32", "e5m2:f32"},        {"e4m3,e5m2", "e4m3,e5m2:bf16"},
      {"e5m2,e4m3:f32", "e5m2,e4m3:f32"}, {"E4M3,E5M2:FP16", "e4m3,e5m2:f16"}, {"e5m2,e5m2:bf16", "e5m2:bf16"},
      {"fp16", "f16"},                 {"bfloat16:float32", "bf16:f32"}, {"float16:fp32", "f16:f32"},
  };
  for (const auto& [given, canonical] : cases) {
    SCOPED_TRACE(given);
    SuiteProblem p = parse("1 1 1 NT " + given).at(0);
    EXPECT_EQ(dtype_spec(p), canonical);
    SuiteProblem q = parse("1 1 1 NT " + dtype_spec(p)).at(0);
    EXPECT_EQ(q.in_dtype, p.in_dtype);
    EXPECT_EQ(q.in_b, p.in_b);
    EXPECT_EQ(q.out_dtype, p.out_dtype);
  }
  SuiteProblem p;
  p.in_dtype = DType::f16;
  p.out_dtype = DType::f32;
  EXPECT_EQ(dtype_spec(p), "f16:f32");
}

TEST(Suite, TypeSpecRoundTripsWithTheMode) {
  using gemmkit::ScaleMode;
  EXPECT_EQ(type_spec(parse("1 1 1 NT bf16:f32 3").at(0)), "bf16:f32");  // 16-bit: the dtype alone
  EXPECT_EQ(type_spec(parse("1 1 1 NT e4m3").at(0)), "e4m3:bf16 tensor");
  for (ScaleMode mode : {ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block, ScaleMode::mx}) {
    SCOPED_TRACE(std::string(scale_mode_name(mode)));
    const std::string line = "5 6 7 NT e4m3,e5m2:f32 " + std::string(scale_mode_name(mode)) + " 2";
    const SuiteProblem p = parse(line).at(0);
    EXPECT_EQ(p.mode, mode);
    EXPECT_EQ(type_spec(p), "e4m3,e5m2:f32 " + std::string(scale_mode_name(mode)));
    const SuiteProblem q = parse("5 6 7 NT " + type_spec(p) + " 2").at(0);
    EXPECT_EQ(q.mode, p.mode);
    EXPECT_EQ(q.in_dtype, p.in_dtype);
    EXPECT_EQ(q.in_b, p.in_b);
    EXPECT_EQ(q.out_dtype, p.out_dtype);
    EXPECT_EQ(q.batch, 2);
  }
  EXPECT_EQ(scale_mode_name(ScaleMode::none), "none");
}

TEST(Suite, ParsesFourBitWeightFormats) {
  using gemmkit::ScaleMode;
  auto p = parse(
      "1 8192 8192 NT bf16,w4:int4g128\n"          // 0: out defaults to A's type
      "16 4096 4096 NT bf16,w4:int4g128z\n"        // 1: zero points
      "64 4096 4096 TT f16,w4:int4g32\n"           // 2: f16 A, groups of 32, A stored K x M
      "1 2 3 NT bf16,w4:int4g128:f32\n"            // 3: an output type after the format
      "1 2 3 NT BF16,W4:INT4G64Z:F16 4\n"          // 4: any case, a batch
      "1 5760 2880 NT bf16,w4:mxfp4\n"             // 5
      "1 2 3 NT f16,w4:mxfp4:f32 2\n"              // 6
      "1 2 3 NT bfloat16,w4:int4g4096:float32\n"   // 7: the usual spellings, per-channel groups
      "1 2 3 NT bf16,w4:int4g256z:bf16\n");        // 8: OUT as A's is A's
  ASSERT_EQ(p.size(), 9u);
  for (const auto& q : p) {
    EXPECT_TRUE(q.w4());
    EXPECT_FALSE(q.fp8());
  }

  EXPECT_EQ(p[0].in_dtype, DType::bf16);
  EXPECT_EQ(p[0].in_b, DType::u4);
  EXPECT_EQ(p[0].b_dtype(), DType::u4);
  EXPECT_EQ(p[0].out_dtype, DType::bf16);
  EXPECT_EQ(p[0].mode, ScaleMode::group);
  EXPECT_EQ(p[0].group, 128);
  EXPECT_FALSE(p[0].zeros);
  EXPECT_EQ(p[0].batch, 1);

  EXPECT_EQ(p[1].group, 128);
  EXPECT_TRUE(p[1].zeros);
  EXPECT_EQ(p[1].mode, ScaleMode::group);

  EXPECT_EQ(p[2].layout, "TT");
  EXPECT_EQ(p[2].in_dtype, DType::f16);
  EXPECT_EQ(p[2].out_dtype, DType::f16);
  EXPECT_EQ(p[2].group, 32);
  EXPECT_FALSE(p[2].zeros);

  EXPECT_EQ(p[3].out_dtype, DType::f32);
  EXPECT_EQ(p[3].group, 128);

  EXPECT_EQ(p[4].in_dtype, DType::bf16);
  EXPECT_EQ(p[4].out_dtype, DType::f16);
  EXPECT_EQ(p[4].group, 64);
  EXPECT_TRUE(p[4].zeros);
  EXPECT_EQ(p[4].batch, 4);

  EXPECT_EQ(p[5].in_b, DType::e2m1);
  EXPECT_EQ(p[5].mode, ScaleMode::mx);
  EXPECT_EQ(p[5].group, 32);
  EXPECT_FALSE(p[5].zeros);
  EXPECT_EQ(p[5].out_dtype, DType::bf16);

  EXPECT_EQ(p[6].in_dtype, DType::f16);
  EXPECT_EQ(p[6].in_b, DType::e2m1);
  EXPECT_EQ(p[6].out_dtype, DType::f32);
  EXPECT_EQ(p[6].batch, 2);

  EXPECT_EQ(p[7].out_dtype, DType::f32);
  EXPECT_EQ(p[7].group, 4096);

  EXPECT_EQ(p[8].out_dtype, DType::bf16);

  // Lines without 4-bit weights keep none of it.
  const SuiteProblem dense = parse("1 2 3 NT bf16\n").at(0);
  EXPECT_FALSE(dense.w4());
  EXPECT_EQ(dense.group, 0);
  EXPECT_FALSE(dense.zeros);

  // The command-line form takes the same fields.
  const SuiteProblem q = parse_problem({"16", "28672", "8192", "nt", "bf16,w4:int4g128z"}, "command line");
  EXPECT_EQ(q.in_b, DType::u4);
  EXPECT_TRUE(q.zeros);
}

TEST(Suite, AcceptsGroupsOf32AndPowersOfTwoFrom64) {
  for (int64_t group : std::vector<int64_t>{32, 64, 128, 256, 512, 1024, int64_t(1) << 40}) {
    SCOPED_TRACE(group);
    EXPECT_EQ(parse("1 1 1 NT bf16,w4:int4g" + std::to_string(group)).at(0).group, group);
  }
  for (const char* group : {"0", "1", "2", "16", "31", "33", "48", "96", "100", "192", "9223372036854775807",
                            "99999999999999999999"}) {
    SCOPED_TRACE(group);
    EXPECT_EQ(parse_error("1 1 1 NT bf16,w4:int4g" + std::string(group)),
              "test.txt:1: group size '" + std::string(group) + "' in dtype 'bf16,w4:int4g" + group +
                  "'; expected 32 or a power of two >= 64");
  }
}

TEST(Suite, FourBitWeightsNeedBStoredNByK) {
  EXPECT_EQ(parse("1 2 3 NT bf16,w4:int4g128").at(0).layout, "NT");
  EXPECT_EQ(parse("1 2 3 tt bf16,w4:mxfp4").at(0).layout, "TT");
  EXPECT_EQ(parse_error("1 2 3 NN bf16,w4:int4g128"),
            "test.txt:1: layout 'NN' with 4-bit weights 'bf16,w4:int4g128'; expected NT or TT (B stored N x K, "
            "K-contiguous, two codes a byte along K)");
  EXPECT_EQ(parse_error("1 2 3 tn f16,w4:mxfp4:f32"),
            "test.txt:1: layout 'tn' with 4-bit weights 'f16,w4:mxfp4:f32'; expected NT or TT (B stored N x K, "
            "K-contiguous, two codes a byte along K)");
}

// Each wrong dtype field: one line naming the field (and the part of it at fault) and what was expected.
TEST(Suite, RejectsMalformedFourBitDtypesWithOneLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"w4:int4g128",
       "dtype 'w4:int4g128' names no activation type; expected A,w4:FORMAT with A bf16, f16, e4m3 or e2m1 (e.g. "
       "bf16,w4:int4g128)"},
      {"e5m2,w4:int4g128",
       "activation type 'e5m2' in dtype 'e5m2,w4:int4g128' with 4-bit weights; expected bf16, f16, e4m3 or e2m1 (e.g. "
       "bf16,w4:int4g128, e2m1,w4:mxfp4)"},
      {"f32,w4:mxfp4",
       "activation type 'f32' in dtype 'f32,w4:mxfp4' with 4-bit weights; expected bf16, f16, e4m3 or e2m1 (e.g. "
       "bf16,w4:int4g128, e2m1,w4:mxfp4)"},
      {"bf16:f32,w4:int4g128",
       "activation type 'bf16:f32' in dtype 'bf16:f32,w4:int4g128' with 4-bit weights; expected bf16, f16, e4m3 or "
       "e2m1 (e.g. bf16,w4:int4g128, e2m1,w4:mxfp4)"},
      {"e4m3:bf16,w4:int4g128",
       "activation type 'e4m3:bf16' in dtype 'e4m3:bf16,w4:int4g128' with 4-bit weights; expected bf16, f16, e4m3 or "
       "e2m1 (e.g. bf16,w4:int4g128, e2m1,w4:mxfp4)"},
      {"e4m3,w4:int4g96", "group size '96' in dtype 'e4m3,w4:int4g96'; expected 32 or a power of two >= 64"},
      {"e4m3,w4:int4g128:e4m3", "output type 'e4m3' in dtype 'e4m3,w4:int4g128:e4m3'; expected bf16, f16 or f32 "
                                "after 4-bit weights (A,w4:FORMAT:OUT)"},
      {"bf16,w4:int8g128",
       "unknown 4-bit weight format 'int8g128' in dtype 'bf16,w4:int8g128'; expected int4gG, int4gGz (with zero "
       "points) or mxfp4, G 32 or a power of two >= 64"},
      {"bf16,w4:int4",
       "unknown 4-bit weight format 'int4' in dtype 'bf16,w4:int4'; expected int4gG, int4gGz (with zero points) or "
       "mxfp4, G 32 or a power of two >= 64"},
      {"bf16,w4:",
       "unknown 4-bit weight format '' in dtype 'bf16,w4:'; expected int4gG, int4gGz (with zero points) or mxfp4, G "
       "32 or a power of two >= 64"},
      {"bf16,w4::f32",
       "unknown 4-bit weight format '' in dtype 'bf16,w4::f32'; expected int4gG, int4gGz (with zero points) or "
       "mxfp4, G 32 or a power of two >= 64"},
      {"bf16,w4:Int4gX",
       "group size 'X' in dtype 'bf16,w4:Int4gX' is not a number; expected int4gG or int4gGz, G 32 or a power of two "
       ">= 64"},
      {"bf16,w4:int4g", "group size '' in dtype 'bf16,w4:int4g' is not a number; expected int4gG or int4gGz, G 32 or "
                        "a power of two >= 64"},
      {"bf16,w4:int4gz", "group size '' in dtype 'bf16,w4:int4gz' is not a number; expected int4gG or int4gGz, G 32 "
                         "or a power of two >= 64"},
      {"bf16,w4:int4g128zz", "group size '128z' in dtype 'bf16,w4:int4g128zz' is not a number; expected int4gG or "
                             "int4gGz, G 32 or a power of two >= 64"},
      {"bf16,w4:int4g+128", "group size '+128' in dtype 'bf16,w4:int4g+128' is not a number; expected int4gG or "
                            "int4gGz, G 32 or a power of two >= 64"},
      {"bf16,w4:int4g-128", "group size '-128' in dtype 'bf16,w4:int4g-128' is not a number; expected int4gG or "
                            "int4gGz, G 32 or a power of two >= 64"},
      {"bf16,w4:int4g48z", "group size '48' in dtype 'bf16,w4:int4g48z'; expected 32 or a power of two >= 64"},
      {"bf16,w4:mxfp4z",
       "4-bit weight format 'mxfp4z' in dtype 'bf16,w4:mxfp4z'; expected mxfp4 alone (one ue8m0 scale per 32 of K: "
       "no group size, no zero points)"},
      {"bf16,w4:mxfp4g32",
       "4-bit weight format 'mxfp4g32' in dtype 'bf16,w4:mxfp4g32'; expected mxfp4 alone (one ue8m0 scale per 32 of "
       "K: no group size, no zero points)"},
      {"bf16,w4:mxfp4:e4m3",
       "output type 'e4m3' in dtype 'bf16,w4:mxfp4:e4m3'; expected bf16, f16 or f32 after 4-bit weights "
       "(A,w4:FORMAT:OUT)"},
      {"bf16,w4:int4g128:", "output type '' in dtype 'bf16,w4:int4g128:'; expected bf16, f16 or f32 after 4-bit "
                            "weights (A,w4:FORMAT:OUT)"},
      {"bf16,w4:int4g128:f32:f32", "output type 'f32:f32' in dtype 'bf16,w4:int4g128:f32:f32'; expected bf16, f16 "
                                   "or f32 after 4-bit weights (A,w4:FORMAT:OUT)"},
      {"bf16,w4:int4g128:u4", "output type 'u4' in dtype 'bf16,w4:int4g128:u4'; expected bf16, f16 or f32 after "
                              "4-bit weights (A,w4:FORMAT:OUT)"},
  };
  for (const auto& [dtype, message] : cases) {
    SCOPED_TRACE(dtype);
    EXPECT_EQ(parse_error("1 2 3 NT " + dtype), "test.txt:1: " + message);
  }
  // 4-bit types are no operand type of their own, and "w4" alone is no B side.
  for (const char* dtype : {"u4", "e2m1", "bf16,u4", "bf16,e2m1", "bf16,w4", "bf16,mxfp4"}) {
    SCOPED_TRACE(dtype);
    EXPECT_EQ(parse_error("1 2 3 NT " + std::string(dtype)).rfind("test.txt:1: unknown dtype '" + std::string(dtype) + "'", 0), 0u);
  }
}

TEST(Suite, FourBitWeightsTakeNoModeField) {
  EXPECT_EQ(parse_error("1 2 3 NT bf16,w4:mxfp4 mx"),
            "test.txt:1: scaling mode 'mx' with 4-bit weights 'bf16,w4:mxfp4'; expected a batch (the weight format "
            "sets the mode: group for int4, mx for mxfp4)");
  EXPECT_EQ(parse_error("1 2 3 NT bf16,w4:int4g128 Group"),
            "test.txt:1: scaling mode 'Group' with 4-bit weights 'bf16,w4:int4g128'; expected a batch (the weight "
            "format sets the mode: group for int4, mx for mxfp4)");
  EXPECT_EQ(parse_error("1 2 3 NT bf16 group"),
            "test.txt:1: scaling mode 'group' with bf16 inputs; expected a batch (a mode goes with e4m3 or e5m2 "
            "inputs only)");
  EXPECT_EQ(parse_error("1 2 3 NT bf16,w4:int4g128 2 3"),
            "test.txt:1: expected 3 to 6 fields for 4-bit weights (M N K [layout] [dtype] [batch]), got 7: "
            "'1 2 3 NT bf16,w4:int4g128 2 3'");
  EXPECT_EQ(parse("1 2 3 NT bf16,w4:int4g128 3").at(0).batch, 3);
}

TEST(Suite, ParsesW4a8LinesWithTheirActivationScales) {
  using gemmkit::ScaleMode;
  auto p = parse(
      "1 8192 8192 NT e4m3,w4:int4g128\n"               // 0: A per token, D bf16
      "16 28672 8192 NT e4m3,w4:int4g128z:f16 block\n"  // 1: zero points, 1x128 activation scales
      "64 8192 28672 TT E4M3,W4:INT4G256:F32 Tensor 3\n"  // 2: any case, a batch
      "4 4096 4096 NT e4m3,w4:int4g4096 rowwise 2\n"    // 3: per-channel groups, the default mode named
      "4 4096 4096 NT e4m3,w4:int4g128:bf16 5\n");      // 4: a number after the dtype is the batch
  ASSERT_EQ(p.size(), 5u);
  for (const auto& q : p) {
    EXPECT_TRUE(q.w4());
    EXPECT_TRUE(q.w4a8());
    EXPECT_FALSE(q.fp8());
    EXPECT_EQ(q.in_dtype, DType::e4m3);
    EXPECT_EQ(q.in_b, DType::u4);
    EXPECT_EQ(q.mode, ScaleMode::group);  // B's, as the format names it
  }
  EXPECT_EQ(std::tie(p[0].mode_a, p[0].out_dtype, p[0].group, p[0].zeros, p[0].batch),
            std::make_tuple(ScaleMode::rowwise, DType::bf16, int64_t(128), false, int64_t(1)));
  EXPECT_EQ(std::tie(p[1].mode_a, p[1].out_dtype, p[1].group, p[1].zeros, p[1].batch),
            std::make_tuple(ScaleMode::block, DType::f16, int64_t(128), true, int64_t(1)));
  EXPECT_EQ(std::tie(p[2].mode_a, p[2].out_dtype, p[2].group, p[2].layout, p[2].batch),
            std::make_tuple(ScaleMode::tensor, DType::f32, int64_t(256), std::string("TT"), int64_t(3)));
  EXPECT_EQ(std::tie(p[3].mode_a, p[3].group, p[3].batch), std::make_tuple(ScaleMode::rowwise, int64_t(4096), int64_t(2)));
  EXPECT_EQ(std::tie(p[4].mode_a, p[4].out_dtype, p[4].batch),
            std::make_tuple(ScaleMode::rowwise, DType::bf16, int64_t(5)));
  // Groups of 32 and 64 under e4m3 activations too.
  EXPECT_EQ(parse("1 2 3 NT e4m3,w4:int4g32z").at(0).group, 32);
  EXPECT_EQ(parse("1 2 3 NT e4m3,w4:int4g64").at(0).group, 64);
  // MXFP4 weights under e4m3 activations: mx scales, groups of 32.
  const SuiteProblem mx = parse("1 5760 2880 NT e4m3,w4:mxfp4:f32 block").at(0);
  EXPECT_TRUE(mx.w4a8());
  EXPECT_EQ(std::tie(mx.in_b, mx.mode, mx.group, mx.mode_a, mx.out_dtype),
            std::make_tuple(DType::e2m1, ScaleMode::mx, int64_t(32), ScaleMode::block, DType::f32));
  // Other lines have no activation scales of their own.
  for (const char* line : {"1 2 3 NT bf16,w4:int4g128", "1 2 3 NT e4m3 rowwise", "1 2 3 NT bf16"}) {
    SCOPED_TRACE(line);
    const SuiteProblem q = parse(line).at(0);
    EXPECT_EQ(q.mode_a, ScaleMode::none);
    EXPECT_FALSE(q.w4a8());
  }
  // The command-line form takes the same fields.
  const SuiteProblem q = parse_problem({"16", "8192", "8192", "nt", "e4m3,w4:int4g128", "block"}, "command line");
  EXPECT_EQ(q.mode_a, ScaleMode::block);
  EXPECT_TRUE(q.w4a8());
}

// A8W4 in MX: a W4A8 line's mode field mx gives the e4m3 A ue8m0 exponents per 32 of K (MXFP8
// activations), where the weights' groups are 32 of K too (mxfp4; int4g32, with zero points or
// without), as gemm() takes them; B keeps the format's mode.
TEST(Suite, ParsesA8w4InMxLines) {
  using gemmkit::ScaleMode;
  auto p = parse(
      "1 5760 2880 NT e4m3,w4:mxfp4 mx\n"            // 0: gpt-oss's up
      "16 8192 8192 NT e4m3,w4:int4g32 MX\n"         // 1: any case
      "4096 5760 2880 TT e4m3,w4:int4g32z:f32 mx 3\n"  // 2: zero points, an output type, a batch
      "1 2 3 NT e4m3,w4:mxfp4:f16 mx\n");             // 3: e2m1 whatever K (its blocks are 32 of K)
  ASSERT_EQ(p.size(), 4u);
  for (const auto& q : p) {
    EXPECT_TRUE(q.w4a8());
    EXPECT_EQ(q.mode_a, ScaleMode::mx);
    EXPECT_EQ(q.group, 32);
  }
  EXPECT_EQ(std::tie(p[0].in_b, p[0].mode, p[0].out_dtype, p[0].batch),
            std::make_tuple(DType::e2m1, ScaleMode::mx, DType::bf16, int64_t(1)));
  EXPECT_EQ(std::tie(p[1].in_b, p[1].mode, p[1].zeros), std::make_tuple(DType::u4, ScaleMode::group, false));
  EXPECT_EQ(std::tie(p[2].in_b, p[2].zeros, p[2].out_dtype, p[2].layout, p[2].batch),
            std::make_tuple(DType::u4, true, DType::f32, std::string("TT"), int64_t(3)));
  EXPECT_EQ(p[3].out_dtype, DType::f16);
  // The command-line form takes the same fields.
  const SuiteProblem q = parse_problem({"16", "8192", "8192", "NT", "e4m3,w4:int4g32", "mx"}, "command line");
  EXPECT_EQ(q.mode_a, ScaleMode::mx);
  // The dense GEMMs it is set against: FP8 with mx on both operands (MXFP8), and bf16.
  const SuiteProblem fp8 = fp8_problem(p[0]);
  EXPECT_TRUE(fp8.fp8());
  EXPECT_EQ(std::tie(fp8.in_dtype, fp8.mode, fp8.mode_a, fp8.m, fp8.n, fp8.k),
            std::make_tuple(DType::e4m3, ScaleMode::mx, ScaleMode::none, int64_t(1), int64_t(5760), int64_t(2880)));
  EXPECT_EQ(type_spec(fp8), "e4m3:bf16 mx");
  EXPECT_EQ(type_spec(dense16_problem(p[0])), "bf16");
}

// mx is refused by name where the weights' groups are not 32 of K: int4 in other groups, and
// int4g32 where one group covers all of K (gemm() takes that as one scale a column).
TEST(Suite, A8w4InMxNeedsWeightsInGroupsOf32) {
  const std::string expected =
      "; expected tensor, rowwise, block or mx (A's scales, block 1x128, mx 1x32 ue8m0 against weights in groups of "
      "32; the weight format sets B's)";
  const std::string why = " (mx exponents go with weights in groups of 32 of K: mxfp4, int4g32)";
  EXPECT_EQ(parse_error("16 8192 8192 NT e4m3,w4:int4g128 mx"),
            "test.txt:1: scaling mode 'mx' for the e4m3 activations of 'e4m3,w4:int4g128' against weights in groups of "
            "128" + why + expected + " (or a batch)");
  EXPECT_EQ(parse_error("16 8192 8192 NT e4m3,w4:int4g64z:f32 Mx 2"),
            "test.txt:1: scaling mode 'Mx' for the e4m3 activations of 'e4m3,w4:int4g64z:f32' against weights in "
            "groups of 64" + why + expected);
  EXPECT_EQ(parse_error("1 64 32 NT e4m3,w4:int4g32 mx"),
            "test.txt:1: scaling mode 'mx' for the e4m3 activations of 'e4m3,w4:int4g32' against weights in groups of "
            "32, one covering all of K = 32" + why + expected + " (or a batch)");
  EXPECT_EQ(parse("1 64 33 NT e4m3,w4:int4g32 mx").at(0).mode_a, gemmkit::ScaleMode::mx);  // two groups
  // 16-bit activations take no mode field at all, mx included.
  EXPECT_EQ(parse_error("1 2 3 NT bf16,w4:int4g32 mx"),
            "test.txt:1: scaling mode 'mx' with 4-bit weights 'bf16,w4:int4g32'; expected a batch (the weight format "
            "sets the mode: group for int4, mx for mxfp4)");
}

TEST(Suite, W4a8LinesNameTheActivationsModeOnly) {
  const std::string expected =
      "; expected tensor, rowwise, block or mx (A's scales, block 1x128, mx 1x32 ue8m0 against weights in groups of "
      "32; the weight format sets B's)";
  EXPECT_EQ(parse_error("1 2 4096 NT e4m3,w4:int4g128 mx"),
            "test.txt:1: scaling mode 'mx' for the e4m3 activations of 'e4m3,w4:int4g128' against weights in groups of "
            "128 (mx exponents go with weights in groups of 32 of K: mxfp4, int4g32)" + expected + " (or a batch)");
  EXPECT_EQ(parse_error("1 2 3 NT e4m3,w4:int4g128z group 2"),
            "test.txt:1: scaling mode 'group' for the e4m3 activations of 'e4m3,w4:int4g128z'" + expected);
  EXPECT_EQ(parse_error("1 2 3 NT e4m3,w4:int4g128 blocks"),
            "test.txt:1: unknown scaling mode 'blocks' for the e4m3 activations of 'e4m3,w4:int4g128'" + expected +
                " (or a batch)");
  EXPECT_EQ(parse_error("1 2 3 NT e4m3,w4:int4g128 2 3"),
            "test.txt:1: unknown scaling mode '2' for the e4m3 activations of 'e4m3,w4:int4g128'" + expected);
  EXPECT_EQ(parse_error("1 2 3 NT e4m3,w4:int4g128 rowwise 0"),
            "test.txt:1: batch '0' is too small; expected an integer >= 1");
  EXPECT_EQ(parse_error("1 2 3 NN e4m3,w4:int4g128"),
            "test.txt:1: layout 'NN' with 4-bit weights 'e4m3,w4:int4g128'; expected NT or TT (B stored N x K, "
            "K-contiguous, two codes a byte along K)");
}

// FP4 x FP4: an e2m1 A (MXFP4 activations) against mxfp4 or int4g32[z] weights, always mx (the
// mode field may name only that), bf16 D by default; set against the dense GEMMs A8W4 in MX lines are.
TEST(Suite, ParsesFp4x4Lines) {
  using gemmkit::ScaleMode;
  auto p = parse(
      "4096 8192 8192 NT e2m1,w4:mxfp4\n"        // 0
      "16 8192 8192 nt E2M1,W4:INT4G32 Mx\n"     // 1: any case, the mode named
      "1 4096 4096 NT e2m1,w4:int4g32z:f32 3\n"  // 2: zero points, an output type, a batch
      "1 2 3 NT e2m1,w4:mxfp4:f16 mx 2\n");      // 3: mxfp4 whatever K, mode and batch
  ASSERT_EQ(p.size(), 4u);
  for (const auto& q : p) {
    EXPECT_TRUE(q.fp4x4());
    EXPECT_TRUE(q.w4());
    EXPECT_FALSE(q.w4a8());
    EXPECT_FALSE(q.fp8());
    EXPECT_EQ(std::tie(q.in_dtype, q.mode_a, q.group), std::make_tuple(DType::e2m1, ScaleMode::mx, int64_t(32)));
  }
  EXPECT_EQ(std::tie(p[0].in_b, p[0].mode, p[0].out_dtype), std::make_tuple(DType::e2m1, ScaleMode::mx, DType::bf16));
  EXPECT_EQ(std::tie(p[1].in_b, p[1].mode, p[1].zeros), std::make_tuple(DType::u4, ScaleMode::group, false));
  EXPECT_EQ(std::tie(p[2].zeros, p[2].out_dtype, p[2].batch), std::make_tuple(true, DType::f32, int64_t(3)));
  EXPECT_EQ(std::tie(p[3].out_dtype, p[3].batch), std::make_tuple(DType::f16, int64_t(2)));
  // Canonical forms, which parse back as given.
  EXPECT_EQ(type_spec(p[0]), "e2m1,w4:mxfp4 mx");
  EXPECT_EQ(type_spec(p[1]), "e2m1,w4:int4g32 mx");
  EXPECT_EQ(dtype_spec(p[2]), "e2m1,w4:int4g32z:f32");
  EXPECT_EQ(type_spec(parse("4096 8192 8192 NT " + type_spec(p[0])).at(0)), "e2m1,w4:mxfp4 mx");
  // The memory floor: A's packed codes and exponents as an e2m1 B's, the weights, D.
  EXPECT_EQ(p[0].bytes(), (4096.0 * 8192 / 2 + 4096.0 * 8192 / 32) + (8192.0 * 8192 / 2 + 8192.0 * 8192 / 32) +
                              4096.0 * 8192 * 2);
  // The dense GEMMs it is set against: those of A8W4 in MX lines (MXFP8, a per-tensor stand-in on
  // Hopper's cuBLASLt), and bf16.
  const SuiteProblem fp8 = fp8_problem(p[0]);
  EXPECT_EQ(std::tie(fp8.in_dtype, fp8.mode, fp8.mode_a), std::make_tuple(DType::e4m3, ScaleMode::mx, ScaleMode::none));
  EXPECT_EQ(type_spec(fp8), type_spec(fp8_problem(parse("4096 8192 8192 NT e4m3,w4:mxfp4 mx").at(0))));
  EXPECT_EQ(type_spec(dense16_problem(p[0])), "bf16");
}

// What an FP4 x FP4 line cannot be, each refusal naming the token.
TEST(Suite, Fp4x4LinesRefuseWhatGemmDoesNot) {
  const std::string mode_expected = "; expected mx (MXFP4 activations: one ue8m0 exponent per 32 of K)";
  EXPECT_EQ(parse_error("1 2 3 NT e2m1,w4:mxfp4 rowwise"),
            "test.txt:1: scaling mode 'rowwise' for the e2m1 activations of 'e2m1,w4:mxfp4'" + mode_expected +
                " (or a batch)");
  EXPECT_EQ(parse_error("1 2 3 NT e2m1,w4:mxfp4 Tensor 2"),
            "test.txt:1: scaling mode 'Tensor' for the e2m1 activations of 'e2m1,w4:mxfp4'" + mode_expected);
  EXPECT_EQ(parse_error("1 2 3 NT e2m1,w4:mxfp4 group"),
            "test.txt:1: scaling mode 'group' for the e2m1 activations of 'e2m1,w4:mxfp4'" + mode_expected +
                " (or a batch)");
  EXPECT_EQ(parse_error("1 2 3 NT e2m1,w4:mxfp4 mxfp"),
            "test.txt:1: unknown scaling mode 'mxfp' for the e2m1 activations of 'e2m1,w4:mxfp4'" + mode_expected +
                " (or a batch)");
  EXPECT_EQ(parse_error("1 2 3 NT e2m1,w4:mxfp4 0"), "test.txt:1: batch '0' is too small; expected an integer >= 1");
  for (const char* format : {"int4g128", "int4g64z", "int4g4096"}) {
    SCOPED_TRACE(format);
    EXPECT_EQ(parse_error("1 2 4096 NT e2m1,w4:" + std::string(format)),
              "test.txt:1: 4-bit weight format '" + std::string(format) + "' with e2m1 activations in dtype 'e2m1,w4:" +
                  format + "'; expected mxfp4, int4g32 or int4g32z (MXFP4 activations' exponents cover 32 of K, as the "
                  "weights' scales must)");
  }
  EXPECT_EQ(parse_error("1 64 32 NT e2m1,w4:int4g32"),
            "test.txt:1: e2m1 activations 'e2m1,w4:int4g32' with K = 32, which one group of int4g32 covers; expected "
            "K > 32 (or mxfp4 weights), as gemm() takes it");
  EXPECT_EQ(parse("1 64 33 NT e2m1,w4:int4g32").size(), 1u);
  for (const char* layout : {"TT", "tn", "NN"}) {
    SCOPED_TRACE(layout);
    EXPECT_NE(parse_error("1 2 3 " + std::string(layout) + " e2m1,w4:mxfp4").find("layout '" + std::string(layout) +
                                                                                  "' with "),
              std::string::npos);
  }
  EXPECT_EQ(parse_error("1 2 3 TT e2m1,w4:mxfp4"),
            "test.txt:1: layout 'TT' with e2m1 activations 'e2m1,w4:mxfp4'; expected NT (A stored M x K, "
            "K-contiguous, two codes a byte along K)");
  EXPECT_EQ(parse_error("1 2 3 NT e2m1,w4:mxfp4:e4m3"),
            "test.txt:1: output type 'e4m3' in dtype 'e2m1,w4:mxfp4:e4m3'; expected bf16, f16 or f32 after 4-bit "
            "weights (A,w4:FORMAT:OUT)");
  // e2m1 is no operand type outside a w4 dtype, nor a B of 8-bit A.
  for (const char* dtype : {"e2m1", "e2m1:bf16", "e2m1,e2m1", "e4m3,e2m1"}) {
    SCOPED_TRACE(dtype);
    EXPECT_EQ(parse_error("1 2 3 NT " + std::string(dtype)).rfind("test.txt:1: unknown dtype '" + std::string(dtype) + "'", 0), 0u);
  }
}

TEST(Suite, W4a8SpecsRoundTripWithTheActivationsMode) {
  using gemmkit::ScaleMode;
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      // given, dtype_spec, type_spec
      {"e4m3,w4:int4g128", "e4m3,w4:int4g128", "e4m3,w4:int4g128 rowwise"},
      {"e4m3,w4:int4g128:bf16 tensor", "e4m3,w4:int4g128", "e4m3,w4:int4g128 tensor"},
      {"E4M3,W4:INT4G128Z:FP16 Block", "e4m3,w4:int4g128z:f16", "e4m3,w4:int4g128z:f16 block"},
      {"e4m3,w4:int4g512:f32 rowwise", "e4m3,w4:int4g512:f32", "e4m3,w4:int4g512:f32 rowwise"},
      {"e4m3,w4:mxfp4 mx", "e4m3,w4:mxfp4", "e4m3,w4:mxfp4 mx"},
      {"E4M3,W4:INT4G32Z:F32 Mx", "e4m3,w4:int4g32z:f32", "e4m3,w4:int4g32z:f32 mx"},
  };
  for (const auto& [given, dtype, type] : cases) {
    SCOPED_TRACE(given);
    const SuiteProblem p = parse("1 1 64 NT " + given + " 2").at(0);
    EXPECT_EQ(dtype_spec(p), dtype);
    EXPECT_EQ(type_spec(p), type);
    const SuiteProblem q = parse("1 1 64 NT " + type_spec(p) + " 2").at(0);
    EXPECT_EQ(std::tie(q.in_dtype, q.in_b, q.out_dtype, q.mode, q.mode_a, q.group, q.zeros, q.batch),
              std::tie(p.in_dtype, p.in_b, p.out_dtype, p.mode, p.mode_a, p.group, p.zeros, p.batch));
  }
}

// Grouped lines take 4-bit weights in their forward passes only (grouped_suite_test has the rest).
TEST(Suite, GroupedLinesTakeFourBitWeightsForwardOnly) {
  std::istringstream ok("grouped fwd 8 64 64 64 bf16,w4:int4g128 balanced\n");
  EXPECT_TRUE(parse_bench_suite(ok, "moe.txt").grouped.at(0).dense.w4());
  std::istringstream in("grouped dgrad 8 64 64 64 bf16,w4:int4g128 balanced\n");
  try {
    parse_bench_suite(in, "moe.txt");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(std::string(e.what()),
              "moe.txt:1: 4-bit weights 'bf16,w4:int4g128' on a grouped 'dgrad' line; expected fwd or masked (the "
              "weights [G, N, K], two codes a byte along K, are the forward's B only)");
  }
}

TEST(Suite, FourBitDtypeSpecRoundTrips) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bf16,w4:int4g128", "bf16,w4:int4g128"},
      {"bf16,w4:int4g128:bf16", "bf16,w4:int4g128"},
      {"BF16,W4:INT4G128Z", "bf16,w4:int4g128z"},
      {"f16,w4:int4g32", "f16,w4:int4g32"},
      {"fp16,w4:int4g64z:fp32", "f16,w4:int4g64z:f32"},
      {"bf16,w4:int4g128:f32", "bf16,w4:int4g128:f32"},
      {"bf16,w4:int4g0128", "bf16,w4:int4g128"},
      {"bf16,w4:mxfp4", "bf16,w4:mxfp4"},
      {"bf16,w4:mxfp4:f16", "bf16,w4:mxfp4:f16"},
      {"f16,w4:MXFP4:f16", "f16,w4:mxfp4"},
  };
  for (const auto& [given, canonical] : cases) {
    SCOPED_TRACE(given);
    const SuiteProblem p = parse("1 1 1 NT " + given + " 2").at(0);
    EXPECT_EQ(dtype_spec(p), canonical);
    EXPECT_EQ(type_spec(p), canonical) << "the format names the mode: no mode after it";
    const SuiteProblem q = parse("1 1 1 NT " + type_spec(p) + " 2").at(0);
    EXPECT_EQ(q.in_dtype, p.in_dtype);
    EXPECT_EQ(q.in_b, p.in_b);
    EXPECT_EQ(q.out_dtype, p.out_dtype);
    EXPECT_EQ(q.mode, p.mode);
    EXPECT_EQ(q.group, p.group);
    EXPECT_EQ(q.zeros, p.zeros);
    EXPECT_EQ(q.batch, 2);
  }
}

TEST(Suite, BytesCountFourBitWeightsAtHalfAByteWithTheirScales) {
  // 16-bit and FP8: A, B and D at their sizes, FP8 scales left out.
  EXPECT_DOUBLE_EQ(parse("2 3 5 NT bf16:f32 7").at(0).bytes(), 7.0 * (2 * 5 * 2 + 5 * 3 * 2 + 2 * 3 * 4));
  EXPECT_DOUBLE_EQ(parse("2 3 5 NT e4m3 block").at(0).bytes(), 2 * 5 + 5 * 3 + 2 * 3 * 2);
  // int4g128, K = 8192: 64 bf16 scales a column.
  const double a = 16.0 * 8192 * 2, b = 8192.0 * 28672 / 2, d = 16.0 * 28672 * 2, scales = 64.0 * 28672 * 2;
  EXPECT_DOUBLE_EQ(parse("16 28672 8192 NT bf16,w4:int4g128").at(0).bytes(), a + b + scales + d);
  EXPECT_DOUBLE_EQ(parse("16 28672 8192 NT bf16,w4:int4g128z").at(0).bytes(), a + b + 2 * scales + d);
  EXPECT_DOUBLE_EQ(parse("16 28672 8192 NT bf16,w4:int4g128:f32 3").at(0).bytes(), 3 * (a + b + scales + 2 * d));
  // W4A8: A at a byte an element, its f32 scales left out as FP8 lines' are; the group scales
  // (bf16) and zero points at two bytes each.
  EXPECT_DOUBLE_EQ(parse("16 28672 8192 NT e4m3,w4:int4g128").at(0).bytes(), a / 2 + b + scales + d);
  EXPECT_DOUBLE_EQ(parse("16 28672 8192 NT e4m3,w4:int4g128z:f32 block").at(0).bytes(), a / 2 + b + 2 * scales + 2 * d);
  EXPECT_DOUBLE_EQ(gemm_bytes(16, 28672, 8192, 1, DType::e4m3, DType::u4, DType::bf16, 128),
                   gemm_bytes(16, 28672, 8192, 1, DType::bf16, DType::u4, DType::bf16, 128) - a / 2);
  // A partial group at the end of K takes a scale: K = 100 in groups of 64 is 2 a column.
  EXPECT_DOUBLE_EQ(parse("1 10 100 NT f16,w4:int4g64z").at(0).bytes(), 100 * 2 + 100 * 10 / 2 + 2 * 10 * 2 * 2 + 10 * 2);
  // mxfp4: one byte per 32 of K, K = 2880 being 90 a column.
  EXPECT_DOUBLE_EQ(parse("4 5760 2880 NT bf16,w4:mxfp4").at(0).bytes(),
                   4.0 * 2880 * 2 + 2880.0 * 5760 / 2 + 90.0 * 5760 + 4.0 * 5760 * 2);
  // The free form, as a ProblemSpec has it: an mx B reads its blocks as 32 whatever `group` says.
  EXPECT_DOUBLE_EQ(gemm_bytes(1, 64, 64, 1, DType::bf16, DType::e2m1, DType::bf16, 128, true),
                   64 * 2 + 64 * 64 / 2 + 2 * 64 + 64 * 2);
  EXPECT_DOUBLE_EQ(gemm_bytes(0, 0, 0, 1, DType::bf16, DType::u4, DType::bf16, 128), 0);
}

using Shape = std::tuple<int64_t, int64_t, int64_t>;

const std::vector<std::pair<int64_t, int64_t>> kNK = {{2112, 7168},  {24576, 1536}, {32768, 512},
                                                      {7168, 16384}, {4096, 7168},  {7168, 2048},
                                                      {8192, 8192},  {28672, 8192}, {8192, 28672}};

void expect_suite(const std::string& file, size_t count, const std::vector<int64_t>& ms) {
  SCOPED_TRACE(file);
  auto problems = load_suite(std::string(GEMMKIT_SOURCE_DIR) + "/bench/suites/" + file);
  EXPECT_EQ(problems.size(), count);
  std::set<Shape> want, got;
  for (int64_t m : ms)
    for (auto [n, k] : kNK) want.insert({m, n, k});
  for (const auto& p : problems) {
    got.insert({p.m, p.n, p.k});
    EXPECT_EQ(p.layout, "NT");
    EXPECT_EQ(dtype_spec(p), "bf16");
    EXPECT_EQ(p.batch, 1);
  }
  EXPECT_EQ(got, want);
}

TEST(Suite, ShippedDenseLargeParses) {
  // The 2 x 9 grid; 8192^3 is one of its entries.
  expect_suite("dense-large.txt", 18, {4096, 8192});
}

TEST(Suite, ShippedDenseDecodeParses) { expect_suite("dense-decode.txt", 36, {1, 16, 64, 128}); }

using Fp8Row = std::tuple<int64_t, int64_t, int64_t, gemmkit::ScaleMode>;

void expect_fp8_suite(const std::string& file, const std::vector<int64_t>& ms,
                      const std::vector<gemmkit::ScaleMode>& modes) {
  SCOPED_TRACE(file);
  auto problems = load_suite(std::string(GEMMKIT_SOURCE_DIR) + "/bench/suites/" + file);
  EXPECT_EQ(problems.size(), ms.size() * kNK.size() * modes.size());
  std::set<Fp8Row> want, got;
  for (auto mode : modes)
    for (int64_t m : ms)
      for (auto [n, k] : kNK) want.insert({m, n, k, mode});
  for (const auto& p : problems) {
    got.insert({p.m, p.n, p.k, p.mode});
    EXPECT_EQ(p.layout, "NT");
    EXPECT_EQ(dtype_spec(p), "e4m3:bf16");
    EXPECT_EQ(p.batch, 1);
  }
  EXPECT_EQ(got, want);
}

TEST(Suite, ShippedFp8LargeParses) {
  using gemmkit::ScaleMode;
  // dense-large's 2 x 9 grid, once per mode.
  expect_fp8_suite("fp8-large.txt", {4096, 8192}, {ScaleMode::tensor, ScaleMode::rowwise, ScaleMode::block});
}

TEST(Suite, ShippedLowbitParses) {
  // Its dense lines; its grouped rows are grouped_suite_test's.
  auto problems = load_bench_suite(std::string(GEMMKIT_SOURCE_DIR) + "/bench/suites/lowbit.txt").dense;
  using Row = std::tuple<int64_t, int64_t, int64_t, std::string>;
  std::set<Row> want, got;
  const std::vector<std::pair<int64_t, int64_t>> llama = {{8192, 8192}, {28672, 8192}, {8192, 28672},
                                                          {4096, 4096}, {14336, 4096}, {4096, 14336}};
  for (int64_t m : {1, 8, 16, 64, 512, 4096})
    for (auto [n, k] : llama) want.insert({m, n, k, "bf16,w4:int4g128"});
  for (int64_t m : {1, 4096})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{8192, 8192}, {28672, 8192}, {8192, 28672}})
      want.insert({m, n, k, "bf16,w4:int4g128z"});
  for (int64_t m : {1, 16, 64, 512, 4096})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{8192, 8192}, {28672, 8192}, {8192, 28672}})
      want.insert({m, n, k, "e4m3,w4:int4g128 rowwise"});
  for (int64_t m : {1, 16, 512, 4096})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{5760, 2880}, {2880, 2880}}) {
      want.insert({m, n, k, "bf16,w4:mxfp4"});
      want.insert({m, n, k, "e4m3,w4:mxfp4 rowwise"});
    }
  // A8W4 in MX: MXFP8 activations against gpt-oss's MXFP4 up and int4 in groups of 32.
  for (int64_t m : {1, 16, 4096}) want.insert({m, 5760, 2880, "e4m3,w4:mxfp4 mx"});
  want.insert({16, 8192, 8192, "e4m3,w4:int4g32 mx"});
  // FP4 x FP4 at fp8-large's shapes, and decode at Llama-3-70B's q/o.
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{4096, 8192, 8192}, {4096, 28672, 8192},
                         {8192, 4096, 7168}, {4096, 7168, 16384}, {4096, 2112, 7168}, {1, 8192, 8192}, {16, 8192, 8192}})
    want.insert({m, n, k, "e2m1,w4:mxfp4 mx"});
  for (const auto& p : problems) {
    got.insert({p.m, p.n, p.k, type_spec(p)});
    EXPECT_TRUE(p.w4());
    EXPECT_EQ(p.layout, "NT");
    EXPECT_EQ(p.batch, 1);
  }
  EXPECT_EQ(problems.size(), want.size());
  EXPECT_EQ(got, want);
  EXPECT_EQ(problems.size(), 84u);
}

TEST(Suite, ShippedFp8DecodeParses) {
  using gemmkit::ScaleMode;
  expect_fp8_suite("fp8-decode.txt", {1, 16, 64, 128}, {ScaleMode::tensor, ScaleMode::block});
}

}  // namespace
