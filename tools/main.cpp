// gemmkit: the command-line tool. info, verify, bench, tune and quantize; see README.md.
#include <CLI/CLI.hpp>

#include <iostream>

#include "commands.h"
#include "gemmkit/error.h"

#ifndef GEMMKIT_DEFAULT_SUITE
#define GEMMKIT_DEFAULT_SUITE "bench/suites/dense-large.txt"
#endif

int main(int argc, char** argv) {
  using namespace gemmkit::tools;
  CLI::App app{"gemmkit: GEMM kernels for NVIDIA Hopper (sm_90a)"};
  app.require_subcommand(1);

  app.add_subcommand("info", "device, clocks and kernel cache");

  CLI::App* verify = app.add_subcommand("verify", "check problems against the double-precision reference");
  std::vector<std::string> shape;
  std::string layout = "NT", dtype = "bf16", verify_suite;
  int64_t batch = 1;
  float beta = 0.0f;
  verify->add_option("shape", shape, "M N K")->expected(0, 3);
  verify->add_option("--layout", layout, "NN, NT, TN or TT (row-major convention; first letter A)");
  verify->add_option("--dtype", dtype, "IN or IN:OUT, e.g. bf16 or f16:f32");
  verify->add_option("--batch", batch, "strided batch count");
  verify->add_option("--beta", beta, "beta; C is a separate random matrix");
  verify->add_option("--suite", verify_suite, "suite file instead of one problem");

  CLI::App* bench = app.add_subcommand("bench", "time our kernels against cuBLASLt");
  BenchOptions bench_options;
  bench_options.suite = GEMMKIT_DEFAULT_SUITE;
  bench->add_option("--suite", bench_options.suite, "suite file")->capture_default_str();
  bench->add_option("--json", bench_options.json, "also write the results as JSON here");
  bench->add_option("--warmup", bench_options.warmup, "untimed runs per problem")->capture_default_str();
  bench->add_option("--runs", bench_options.runs, "timed runs per problem (median reported)")
      ->check(CLI::Range(20, 100000))
      ->capture_default_str();
  ConfigOverrides& overrides = bench_options.overrides;
  CLI::Option* tile = bench->add_option("--tile", overrides.tile, "force a tile shape MxN on our side, e.g. 128x176");
  CLI::Option* cluster = bench->add_option("--cluster", overrides.cluster, "force CTAs per cluster on our side (1 or 2)")
      ->check(CLI::Range(1, 2));
  CLI::Option* store_buffers =
      bench->add_option("--store-buffers", overrides.store_buffers, "force 8 KB epilogue buffers per warpgroup (1-8)")
          ->check(CLI::Range(1, 8));
  CLI::Option* splits =
      bench->add_option("--splits", overrides.splits, "force split-K parts on our side (1 for none; tiles up to 128 wide)")
          ->check(CLI::Range(1, gemmkit::kMaxSplits));
  // Forcing a plan skips gemm()'s own path, which is what --overhead times.
  CLI::Option* overhead =
      bench->add_flag("--overhead", bench_options.overhead,
                      "time host microseconds per call of ours, cuBLASLt and a bare launch of an empty kernel on one small problem "
                      "(ignores --suite, --warmup, --runs)")
          ->excludes(tile, cluster, store_buffers, splits);
  bench->add_option("--overhead-shape", bench_options.overhead_shape, "M,N,K of the --overhead problem (NT, bf16)")
      ->needs(overhead)
      ->capture_default_str();
  CLI::Option* hint_matrix =
      bench->add_option("--hint-matrix", bench_options.hint_matrix,
                        "N K: tune M = 64, 256, 4096 of N x K (NT bf16), then time each tuned kernel at each M, pinned and "
                        "dispatched by M (ignores --suite)")
          ->expected(2)
          ->check(CLI::PositiveNumber)
          ->excludes(tile, cluster, store_buffers, splits, overhead);
  bench
      ->add_option("--chain", bench_options.chains,
                   "chain files (bench/chains): each chain's GEMMs replayed from one CUDA graph, ours against cuBLASLt's "
                   "(ignores --suite)")
      ->excludes(tile, cluster, store_buffers, splits, overhead, hint_matrix);

  CLI::App* tune = app.add_subcommand("tune", "time candidate kernels for each problem and store the winners in the tuning database");
  std::string tune_suite, tune_json;
  tune->add_option("--suite", tune_suite, "suite file")->required();
  tune->add_option("--json", tune_json, "also write the results as JSON here");

  CLI::App* quantize = app.add_subcommand(
      "quantize", "quantise random bf16 data for each FP8 problem of a suite, multiply in FP8, check against the bf16 product");
  std::string quantize_suite;
  quantize->add_option("--suite", quantize_suite, "suite file of FP8 problems")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (app.got_subcommand("info")) return run_info();
    if (app.got_subcommand("bench")) return run_bench(bench_options);
    if (app.got_subcommand("tune")) return run_tune(tune_suite, tune_json);
    if (app.got_subcommand("quantize")) return run_quantize(load_suite(quantize_suite));
    std::vector<SuiteProblem> problems;
    if (!verify_suite.empty()) {
      if (!shape.empty()) throw gemmkit::Error(gemmkit::ErrorCode::invalid_argument, "verify: give M N K or --suite, not both");
      problems = load_suite(verify_suite);
    } else {
      if (shape.size() != 3) throw gemmkit::Error(gemmkit::ErrorCode::invalid_argument, "verify: expected M N K or --suite FILE");
      shape.insert(shape.end(), {layout, dtype, std::to_string(batch)});
      problems.push_back(parse_problem(shape, "command line"));
    }
    return run_verify(problems, beta);
  } catch (const std::exception& e) {
    std::string message = e.what();
    std::cerr << "gemmkit: error: " << message.substr(0, message.find('\n')) << "\n";
    return 1;
  }
}
