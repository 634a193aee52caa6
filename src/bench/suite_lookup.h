// Suites and chains by name or path: `--suite dense-decode`, `--suite dense-decode.txt` or
// `--suite path/to/my.txt`, wherever the CLI is installed.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/suite.h"

namespace gemmkit::tools {

// Where files of `kind` ("suites" or "chains") named without a path are looked for, in order:
// <dir of the executable>/../<kind> (the Python package: gemmkit/bin/gemmkit, gemmkit/suites),
// <dir of the executable>/../share/gemmkit/<kind> (cmake --install), and the source tree's
// bench/<kind> where it exists.
std::vector<std::filesystem::path> search_dirs(const std::string& kind);

// The file `name_or_path` names: an existing file as given, else NAME or NAME.txt in the first of
// `dirs` holding one. Throws Error(io_error) naming `what` ("suite", "chain") and listing the
// names `dirs` hold.
std::filesystem::path find_named_file(const std::string& name_or_path, const std::string& what,
                                      const std::vector<std::filesystem::path>& dirs);

// The names (stems of the .txt files) in `dirs`, sorted, each once.
std::vector<std::string> available_names(const std::vector<std::filesystem::path>& dirs);

// A suite that holds no problems (only comments and blank lines); what() names the file.
class EmptySuite : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The suite `name_or_path` names (find_named_file over search_dirs("suites")), parsed, dense and
// grouped lines. Throws EmptySuite where it holds no problems.
Suite load_named_bench_suite(const std::string& name_or_path);

// Its dense lines, for the commands that run no grouped line (dense_lines in bench/suite.h).
std::vector<SuiteProblem> load_named_suite(const std::string& name_or_path);

// The chain file `name_or_path` names (find_named_file over search_dirs("chains")).
std::string find_chain(const std::string& name_or_path);

}  // namespace gemmkit::tools
