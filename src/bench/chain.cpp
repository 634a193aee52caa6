#include "bench/chain.h"

#include <fstream>

#include "gemmkit/error.h"

namespace gemmkit::tools {

Chain parse_chain(std::istream& in, const std::string& name) {
  Chain chain;
  chain.name = name;
  int layers_line = 0;  // where the `layers` directive was, 0 before one
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    const std::vector<std::string> fields = line_fields(text);
    if (fields.empty()) continue;
    const std::string where = name + ":" + std::to_string(line);
    if (fields[0] != "layers") {
      SuiteProblem p = parse_problem(fields, where);
      p.line = line;
      chain.layer.push_back(p);
      continue;
    }
    if (layers_line > 0) {
      throw Error(ErrorCode::invalid_argument, where + ": a second 'layers' line; expected one at most (the first is line " +
                                                   std::to_string(layers_line) + ")");
    }
    if (fields.size() != 2) {
      throw Error(ErrorCode::invalid_argument,
                  where + ": expected 'layers N', got " + std::to_string(fields.size() - 1) + " values");
    }
    const int64_t layers = parse_int(fields[1], "layers", 1, where);
    if (layers > kMaxChainLayers) {
      throw Error(ErrorCode::invalid_argument,
                  where + ": layers '" + fields[1] + "' is too large; expected at most " + std::to_string(kMaxChainLayers));
    }
    chain.layers = int(layers);
    layers_line = line;
  }
  if (in.bad()) throw Error(ErrorCode::io_error, "cannot read chain file '" + name + "'");
  if (chain.layer.empty()) {
    throw Error(ErrorCode::invalid_argument, name + ": no GEMMs; expected at least one 'M N K [layout] [dtype] ...' line");
  }
  return chain;
}

Chain load_chain(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::io_error, "cannot open chain file '" + path + "'");
  return parse_chain(in, path);
}

std::vector<SuiteProblem> layer_gemms(const std::vector<Chain>& chains) {
  std::vector<SuiteProblem> gemms;
  for (const Chain& chain : chains) gemms.insert(gemms.end(), chain.layer.begin(), chain.layer.end());
  return gemms;
}

}  // namespace gemmkit::tools
