// gemmkit: the command-line tool. info, verify, bench, tune and quantize; see README.md.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "gemmkit/error.h"
#include "runtime/device.h"
#include "bench/suite_lookup.h"
#include "epilogue/program.h"

int main(int argc, char** argv) {
  using namespace gemmkit::tools;
  args::Parser parser("gemmkit", "gemmkit: GEMM kernels for NVIDIA Hopper (sm_90a)");

  args::Command& info = parser.command("info", "device, clocks and kernel cache");

  args::Command& verify = parser.command("verify", "check problems against the double-precision reference");
  std::vector<std::string> shape;
  std::string layout = "NT", dtype = "bf16", verify_suite;
  int64_t batch = 1;
  float beta = 0.0f;
  verify.positionals("shape", shape, 3, "one problem's sizes").metavar("M N K");
  verify.option("--layout", layout, "NN, NT, TN or TT (row-major convention; first letter A)").metavar("LAYOUT").show_default();
  verify.option("--dtype", dtype, "IN or IN:OUT, e.g. bf16 or f16:f32").metavar("TYPE").show_default();
  verify.option("--batch", batch, "strided batch count").at_least(1).show_default();
  verify.option("--beta", beta, "beta; C is a separate random matrix").show_default();
  verify.option("--suite", verify_suite, "suite instead of one problem: a name (bench/suites) or a file").metavar("NAME|FILE");

  args::Command& bench = parser.command("bench", "time our kernels against cuBLASLt");
  BenchOptions bench_options;
  bench_options.suite = "dense-large";
  bench.option("--suite", bench_options.suite, "suite: a name (bench/suites) or a file").metavar("NAME|FILE").show_default();
  bench.option("--json", bench_options.json, "also write the results as JSON here").metavar("FILE");
  bench.option("--warmup", bench_options.warmup, "untimed runs per problem").at_least(0).show_default();
  bench.option("--runs", bench_options.runs, "timed runs per problem (median reported)").range(20, 100000).show_default();
  ConfigOverrides& overrides = bench_options.overrides;
  args::Option& tile = bench.option("--tile", overrides.tile, "force a tile shape MxN on our side, e.g. 128x176").metavar("MxN");
  args::Option& cluster = bench.option("--cluster", overrides.cluster, "force CTAs per cluster on our side").range(1, 2);
  args::Option& store_buffers =
      bench.option("--store-buffers", overrides.store_buffers, "force 8 KB epilogue buffers per warpgroup").range(1, 8);
  args::Option& splits =
      bench.option("--splits", overrides.splits, "force split-K parts on our side (1 for none; tiles up to 128 wide)")
          .range(1, gemmkit::kMaxSplits);
  args::Option* const forcing[] = {&tile, &cluster, &store_buffers, &splits};
  args::Option& epilogue = bench.option("--epilogue", bench_options.epilogue,
               "fuse this epilogue into our side of the suite's dense lines (its tensors random, bf16), and time our "
               "GEMM without it too, e.g. 'silu(acc + bias[n])'")
      .metavar("TEXT");
  bench.option("--max-sms", bench_options.max_sms, "run grouped rows on at most N SMs (grouped_gemm's SM budget)")
      .at_least(1)
      .metavar("N");
  // Forcing a plan skips gemm()'s own path, which is what --overhead times.
  args::Option& overhead = bench.flag("--overhead", bench_options.overhead,
                                      "time host microseconds per call of ours, cuBLASLt and a bare launch of an empty kernel "
                                      "on one small problem (ignores --suite, --warmup, --runs)");
  bench.option("--overhead-shape", bench_options.overhead_shape, "M,N,K of the --overhead problem (NT, bf16)")
      .metavar("M,N,K")
      .needs(overhead)
      .show_default();
  args::Option& hint_matrix = bench.option("--hint-matrix", bench_options.hint_matrix,
                                           "tune M = 64, 256, 4096 of N x K (NT bf16), then time each tuned kernel at each "
                                           "M, pinned and dispatched by M (ignores --suite)")
                                  .values(2)
                                  .at_least(1)
                                  .metavar("N K");
  args::Option& chain = bench.option("--chain", bench_options.chains,
                                     "chains, names (bench/chains) or files: each chain's GEMMs replayed from one CUDA graph, ours "
                                     "against cuBLASLt's (ignores --suite)")
                            .metavar("NAME|FILE");
  for (args::Option* o : forcing) overhead.excludes(*o);
  for (args::Option* o : forcing) hint_matrix.excludes(*o);
  for (args::Option* o : forcing) chain.excludes(*o);
  hint_matrix.excludes(overhead);
  for (args::Option* o : {&overhead, &hint_matrix, &chain}) o->excludes(epilogue);
  chain.excludes(overhead).excludes(hint_matrix);

  args::Command& tune = parser.command("tune", "time candidate kernels for each problem and store the winners in the tuning database");
  std::string tune_suite, tune_json;
  tune.option("--suite", tune_suite, "suite: a name (bench/suites) or a file").metavar("NAME|FILE").required();
  tune.option("--json", tune_json, "also write the results as JSON here").metavar("FILE");

  args::Command& quantize = parser.command(
      "quantize", "quantise random bf16 data for each FP8 problem of a suite, multiply in FP8, check against the bf16 product");
  std::string quantize_suite;
  quantize.option("--suite", quantize_suite, "suite of FP8 problems: a name (bench/suites) or a file").metavar("NAME|FILE").required();

  // Every command that uses a GPU takes --device; -1 leaves the current device (0) in place.
  int device = -1;
  for (args::Command* c : {&info, &verify, &bench, &tune, &quantize}) {
    c->option("--device", device, "the GPU to use (cudaSetDevice); default the current one, 0").at_least(0);
  }

  parser.exit_status(0, "success (and --help, --version)");
  parser.exit_status(1, "the command could not do what it was asked: a suite or chain file missing, empty or wrong, a "
                        "--json path that cannot be written (checked before the run), no usable GPU, a CUDA error, a "
                        "problem the kernels cannot run as forced, a failed verify or quantize check");
  parser.exit_status(2, "a usage error, found before anything runs: an unknown command or option; a value missing, "
                        "malformed or out of range (a number, a shape, a layout, a dtype, a tile name); options that "
                        "cannot be combined");

  // Usage errors, and --json paths that cannot be written, are found before anything runs.
  args::Parser::Result parsed;
  std::vector<SuiteProblem> problems;  // verify's problem from the command line
  try {
    parsed = parser.parse(std::vector<std::string>(argv + 1, argv + argc));
    // Values the parser takes as text: a mistake in them is a usage error too.
    const auto usage_checked = [](const auto& check) {
      try {
        check();
      } catch (const gemmkit::Error& e) {
        throw args::UsageError(e.what());
      }
    };
    if (parsed.command == &verify && parsed.action == args::Parser::Action::run) {
      if (!verify_suite.empty() && !shape.empty()) throw args::UsageError("verify: give M N K or --suite, not both");
      if (verify_suite.empty() && shape.size() != 3) throw args::UsageError("verify: expected M N K or --suite FILE");
      if (verify_suite.empty()) {
        shape.insert(shape.end(), {layout, dtype, std::to_string(batch)});
        usage_checked([&] { problems.push_back(parse_problem(shape, "verify")); });
      }
    }
    if (parsed.command == &bench && parsed.action == args::Parser::Action::run) {
      if (!overrides.tile.empty()) usage_checked([&] { parse_tile(overrides.tile); });
      usage_checked([&] { parse_overhead_shape(bench_options.overhead_shape); });
      if (!bench_options.epilogue.empty()) usage_checked([&] { gemmkit::epilogue::parse(bench_options.epilogue); });
    }
  } catch (const args::UsageError& e) {
    std::fprintf(stderr, "gemmkit: error: %s\n", e.what());
    return 2;
  }
  switch (parsed.action) {
    case args::Parser::Action::help: std::printf("%s", parsed.help_text.c_str()); return 0;
    case args::Parser::Action::usage: std::fprintf(stderr, "%s", parsed.help_text.c_str()); return 2;
    case args::Parser::Action::version: return run_version();
    case args::Parser::Action::run: break;
  }
  const std::string command = parsed.command->name();
  try {
    for (const std::string* json : {&bench_options.json, &tune_json}) {
      if (!json->empty()) check_writable(*json, command);
    }
    if (device >= 0) gemmkit::runtime::select_device(device);
    if (command == "info") return run_info(device);
    if (command == "bench") return run_bench(bench_options);
    if (command == "tune") return run_tune(tune_suite, tune_json);
    if (command == "quantize") return run_quantize(load_named_suite(quantize_suite));
    if (!verify_suite.empty()) problems = load_named_suite(verify_suite);
    return run_verify(problems, beta);
  } catch (const EmptySuite& e) {
    std::fprintf(stderr, "gemmkit: warning: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::string message = e.what();
    std::cerr << "gemmkit: error: " << message.substr(0, message.find('\n')) << "\n";
    return 1;
  }
}
