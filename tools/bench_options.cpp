#include "bench_options.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "gemmkit/error.h"

namespace gemmkit::tools {
namespace {

// "bench: cannot write --json out/x.json (No such file or directory)", the reason where the
// failed open left one in errno.
Error cannot_write(const std::string& path, const std::string& command, int error) {
  return Error(ErrorCode::io_error, command + ": cannot write --json " + path +
                                        (error != 0 ? " (" + std::string(std::strerror(error)) + ")" : ""));
}

}  // namespace

TileShape parse_tile(const std::string& text) {
  std::vector<TileShape> all = tile_shapes(false);
  for (TileShape t : tile_shapes(true)) {
    if (std::find(all.begin(), all.end(), t) == all.end()) all.push_back(t);
  }
  std::string shapes;
  for (TileShape t : all) {
    const std::string name = std::to_string(t.m) + "x" + std::to_string(t.n);
    if (name == text) return t;
    shapes += (shapes.empty() ? "" : ", ") + name;
  }
  throw Error(ErrorCode::invalid_argument, "bench: --tile " + text + " is not a tile shape the kernel is built for (" + shapes + ")");
}

KernelConfig apply_overrides(KernelConfig config, const ConfigOverrides& overrides, int smem_limit) {
  if (!overrides.tile.empty()) {
    const TileShape tile = parse_tile(overrides.tile);
    const std::vector<TileShape>& built = tile_shapes(is_fp8(config.in));
    if (std::find(built.begin(), built.end(), tile) == built.end()) {
      throw Error(ErrorCode::invalid_argument, "bench: --tile " + overrides.tile + " is not a tile shape for " +
                                                   std::string(dtype_name(config.in)) + " inputs");
    }
    config = with_tile(config, tile);
  }
  if (overrides.cluster > 0) config.cluster_m = overrides.cluster;
  if (config.cluster_m > 1) config = staged_instead(config);  // realigning runs unclustered
  // Unless forced, the store buffers are the forced tile's own, as the heuristic gives them.
  config.store_buffers = overrides.store_buffers > 0 ? overrides.store_buffers : store_buffers_for(config, smem_limit);
  if (overrides.splits > 1 && config.tile_n > kMaxSplitTileN) {
    throw Error(ErrorCode::invalid_argument, "bench: --splits " + std::to_string(overrides.splits) + " needs a tile at most " +
                                                 std::to_string(kMaxSplitTileN) + " wide, not " + config.name());
  }
  if (overrides.splits > 0) config.splits = overrides.splits;
  if (config.tile_n > kMaxSplitTileN) config.splits = 1;
  config.stages = max_stages(config, smem_limit);
  if (!fits(config, {1, smem_limit})) {
    throw Error(ErrorCode::invalid_argument, "bench: --tile, --cluster, --store-buffers and --splits make " + config.name() +
                                                 ", which does not fit in the device's shared memory");
  }
  return config;
}

std::string compile_summary(int compiled, size_t kernels, size_t configs) {
  const size_t cached = kernels - size_t(compiled);
  return "compiled " + std::to_string(compiled) + (compiled == 1 ? " kernel" : " kernels") + " for " + std::to_string(configs) +
         (configs == 1 ? " configuration" : " configurations") + " (" + std::to_string(cached) +
         (cached == 1 ? " was" : " were") + " cached)";
}

SuiteProblem parse_overhead_shape(const std::string& text) {
  const Error bad(ErrorCode::invalid_argument,
                  "bench: --overhead-shape expects M,N,K as three positive integers, got '" + text + "'");
  int64_t dims[3] = {};
  const char* at = text.data();
  const char* end = at + text.size();
  for (int i = 0; i < 3; ++i) {
    if (i > 0 && (at == end || *at++ != ',')) throw bad;
    // from_chars takes neither '+' nor spaces, so "+64" and " 64" fail too.
    auto [next, ec] = std::from_chars(at, end, dims[i]);
    if (ec != std::errc() || dims[i] <= 0) throw bad;
    at = next;
  }
  if (at != end) throw bad;
  SuiteProblem p;
  p.m = dims[0];
  p.n = dims[1];
  p.k = dims[2];
  return p;
}

void check_writable(const std::string& path, const std::string& command) {
  std::error_code ignored;
  // symlink_status: a dangling link is a file that exists, not to be removed.
  const bool existed = std::filesystem::exists(std::filesystem::symlink_status(path, ignored));
  errno = 0;
  if (!std::ofstream(path, std::ios::app)) throw cannot_write(path, command, errno);
  if (!existed) std::filesystem::remove(path, ignored);
}

void write_json(const std::string& path, const nlohmann::json& json, const std::string& command) {
  errno = 0;
  std::ofstream out(path);
  out << json.dump(2) << "\n";
  if (!out) throw cannot_write(path, command, errno);
}

}  // namespace gemmkit::tools
