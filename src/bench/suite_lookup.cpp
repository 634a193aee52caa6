#include "bench/suite_lookup.h"

#include <algorithm>
#include <system_error>

#include "gemmkit/error.h"

namespace gemmkit::tools {
namespace fs = std::filesystem;

namespace {

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& item : items) s += (s.empty() ? "" : ", ") + item;
  return s;
}

}  // namespace

std::vector<fs::path> search_dirs(const std::string& kind) {
  std::vector<fs::path> dirs;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path prefix = exe.parent_path().parent_path();
    dirs.push_back(prefix / kind);
    dirs.push_back(prefix / "share" / "gemmkit" / kind);
  }
#ifdef GEMMKIT_SOURCE_BENCH_DIR
  dirs.push_back(fs::path(GEMMKIT_SOURCE_BENCH_DIR) / kind);
#endif
  // Only those that exist: they are also what an error message lists.
  std::erase_if(dirs, [](const fs::path& dir) {
    std::error_code error;
    return !fs::is_directory(dir, error);
  });
  return dirs;
}

std::vector<std::string> available_names(const std::vector<fs::path>& dirs) {
  std::vector<std::string> names;
  for (const fs::path& dir : dirs) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".txt" && is_file(it->path())) names.push_back(it->path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

fs::path find_named_file(const std::string& name_or_path, const std::string& what, const std::vector<fs::path>& dirs) {
  if (is_file(name_or_path)) return name_or_path;
  // A name has no directory part; anything else was meant as a path.
  const bool name = !name_or_path.empty() && name_or_path.find('/') == std::string::npos;
  std::vector<std::string> searched;
  for (const fs::path& dir : dirs) {
    for (const std::string& file : {name_or_path, name_or_path + ".txt"}) {
      if (name && is_file(dir / file)) return dir / file;
    }
    searched.push_back(dir.string());
  }
  const std::vector<std::string> names = available_names(dirs);
  const std::string where = searched.empty() ? "no " + what + " directory found" : "looked in " + join(searched);
  std::string message = "no " + what + " '" + name_or_path + "': " +
                        (name ? "not a file, nor a " + what + " name (" + where + ")" : "no such file");
  message += names.empty() ? "; no " + what + "s found by name" : "; " + what + "s: " + join(names);
  throw Error(ErrorCode::io_error, message);
}

Suite load_named_bench_suite(const std::string& name_or_path) {
  const std::string path = find_named_file(name_or_path, "suite", search_dirs("suites")).string();
  Suite suite = load_bench_suite(path);
  if (suite.dense.empty() && suite.grouped.empty()) {
    throw EmptySuite(path + " holds no problems (only comments and blank lines): nothing to run");
  }
  return suite;
}

std::vector<SuiteProblem> load_named_suite(const std::string& name_or_path) {
  return dense_lines(load_named_bench_suite(name_or_path));
}

std::string find_chain(const std::string& name_or_path) {
  return find_named_file(name_or_path, "chain", search_dirs("chains")).string();
}

}  // namespace gemmkit::tools
