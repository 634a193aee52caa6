#include "args.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <limits>
#include <sstream>

namespace gemmkit::tools::args {
namespace {

constexpr size_t kHelpWidth = 100;  // columns the help text is wrapped to
constexpr size_t kNameColumn = 26;  // where option descriptions start

// An argument that names an option rather than being a value: "-x" or "--x", not "-1" or "-.5".
bool looks_like_option(const std::string& s) {
  return s.size() > 1 && s[0] == '-' && !std::isdigit(static_cast<unsigned char>(s[1])) && s[1] != '.';
}

// The whole text as a base-10 integer.
std::optional<int64_t> to_integer(const std::string& text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return v;
}

// `text` word-wrapped to `width` columns, lines after the first indented by `indent`.
std::string wrap(const std::string& text, size_t indent, size_t width) {
  std::istringstream words(text);
  std::string out, line, word;
  while (words >> word) {
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

// One help entry: the name in a column, the description wrapped beside it.
std::string entry(const std::string& name, const std::string& description) {
  std::string head = "  " + name;
  head += head.size() + 2 <= kNameColumn ? std::string(kNameColumn - head.size(), ' ') : "\n" + std::string(kNameColumn, ' ');
  return head + wrap(description, kNameColumn, kHelpWidth) + "\n";
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string s;
  for (const std::string& item : items) s += (s.empty() ? "" : separator) + item;
  return s;
}

}  // namespace

Option& Option::required() {
  required_ = true;
  return *this;
}

Option& Option::range(int64_t min, int64_t max) {
  min_ = min;
  max_ = max;
  return *this;
}

Option& Option::at_least(int64_t min) {
  min_ = min;
  return *this;
}

Option& Option::values(int count) {
  min_values_ = max_values_ = count;
  return *this;
}

Option& Option::metavar(std::string name) {
  metavar_ = std::move(name);
  return *this;
}

Option& Option::show_default() {
  default_text_ = initial_;
  return *this;
}

Option& Option::excludes(Option& other) {
  excludes_.push_back(&other);
  other.excludes_.push_back(this);
  return *this;
}

Option& Option::needs(Option& other) {
  needs_.push_back(&other);
  return *this;
}

std::optional<int64_t> Option::integer(const std::string& text) const {
  const std::optional<int64_t> n = to_integer(text);
  if (!n || (min_ && *n < *min_) || (max_ && *n > *max_)) return std::nullopt;
  return n;
}

std::string Option::expected() const {
  if (!integer_) return number_ ? "a number" : "a value";
  if (min_ && max_) return "an integer from " + std::to_string(*min_) + " to " + std::to_string(*max_);
  if (min_ && *min_ == 1) return "a positive integer";
  if (min_) return "an integer >= " + std::to_string(*min_);
  return "an integer";
}

std::string Option::display() const {
  if (kind_ == Kind::flag) return name_;
  if (kind_ == Kind::positional) return metavar_;
  // A metavar with a space names every value already ("N K").
  std::string s = name_ + " " + metavar_;
  for (int i = 1; i < max_values_ && metavar_.find(' ') == std::string::npos; ++i) s += " " + metavar_;
  return max_values_ < 0 ? s + "..." : s;
}

void Option::take(const std::string& command, const std::string& value) {
  if (store_(value)) return;
  const std::string what = kind_ == Kind::positional ? name_ : display();
  throw UsageError(command + ": " + what + " expects " + expected() + ", got '" + value + "'");
}

Command::Command(std::string program, std::string name, std::string help)
    : program_(std::move(program)), name_(std::move(name)), help_(std::move(help)) {}

Option& Command::add(const std::string& name, const std::string& help, const std::string& metavar, const std::string& initial) {
  Option& o = options_.emplace_back();
  o.name_ = name;
  o.help_ = help;
  o.metavar_ = metavar;
  o.initial_ = initial;
  return o;
}

Option& Command::option(const std::string& name, std::string& target, const std::string& help) {
  Option& o = add(name, help, "TEXT", target);
  o.store_ = [&target](const std::string& v) {
    target = v;
    return true;
  };
  return o;
}

template <typename T>
Option& Command::integer_option(const std::string& name, T& target, const std::string& help) {
  Option& o = add(name, help, "N", std::to_string(target));
  o.integer_ = true;
  o.store_ = [&target, &o](const std::string& v) {
    const std::optional<int64_t> n = o.integer(v);
    const bool fits = n && *n >= std::numeric_limits<T>::min() && *n <= std::numeric_limits<T>::max();
    if (fits) target = T(*n);
    return fits;
  };
  return o;
}

Option& Command::option(const std::string& name, int64_t& target, const std::string& help) {
  return integer_option(name, target, help);
}

Option& Command::option(const std::string& name, int& target, const std::string& help) {
  return integer_option(name, target, help);
}

Option& Command::option(const std::string& name, float& target, const std::string& help) {
  char initial[32];
  std::snprintf(initial, sizeof initial, "%g", target);
  Option& o = add(name, help, "X", initial);
  o.number_ = true;
  o.store_ = [&target](const std::string& v) {
    float x = 0;
    const char* end = v.data() + v.size();
    auto [ptr, ec] = std::from_chars(v.data(), end, x);
    if (ec != std::errc() || ptr != end || v.empty()) return false;
    target = x;
    return true;
  };
  return o;
}

Option& Command::option(const std::string& name, std::vector<std::string>& target, const std::string& help) {
  Option& o = add(name, help, "TEXT", join(target, " "));
  o.max_values_ = -1;
  o.store_ = [&target](const std::string& v) {
    target.push_back(v);
    return true;
  };
  return o;
}

Option& Command::option(const std::string& name, std::vector<int64_t>& target, const std::string& help) {
  Option& o = add(name, help, "N", "");
  o.integer_ = true;
  o.max_values_ = -1;
  o.store_ = [&target, &o](const std::string& v) {
    const std::optional<int64_t> n = o.integer(v);
    if (n) target.push_back(*n);
    return n.has_value();
  };
  return o;
}

Option& Command::flag(const std::string& name, bool& target, const std::string& help) {
  Option& o = add(name, help, "", "");
  o.kind_ = Option::Kind::flag;
  o.min_values_ = o.max_values_ = 0;
  o.set_flag_ = [&target] { target = true; };
  return o;
}

Option& Command::positionals(const std::string& name, std::vector<std::string>& target, int max, const std::string& help) {
  Option& o = option(name, target, help);
  o.kind_ = Option::Kind::positional;
  o.metavar_ = name;
  o.max_values_ = max;
  return o;
}

Option* Command::find(const std::string& name) {
  for (Option& o : options_) {
    if (o.kind_ != Option::Kind::positional && o.name_ == name) return &o;
  }
  return nullptr;
}

bool Command::parse(const std::vector<std::string>& args) {
  Option* positional = nullptr;
  for (Option& o : options_) {
    o.seen_ = 0;  // given() answers for this parse only
    if (o.kind_ == Option::Kind::positional) positional = &o;
  }
  const std::string see = " (" + program_ + " " + name_ + " --help)";
  bool only_positionals = false;  // after "--"
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (only_positionals || !looks_like_option(arg)) {
      if (positional == nullptr || (positional->max_values_ >= 0 && positional->seen_ >= positional->max_values_)) {
        const std::string limit = positional ? " (" + positional->display() + " takes at most " +
                                                   std::to_string(positional->max_values_) + " values)"
                                             : "";
        throw UsageError(name_ + ": unexpected argument '" + arg + "'" + limit + see);
      }
      positional->take(name_, arg);
      ++positional->seen_;
      continue;
    }
    if (arg == "--") {
      only_positionals = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") return false;
    const size_t equals = arg.find('=');
    const std::string name = arg.substr(0, equals);
    Option* o = find(name);
    if (o == nullptr) throw UsageError(name_ + ": unknown option '" + name + "'" + see);
    if (o->seen_ > 0 && o->max_values_ >= 0) throw UsageError(name_ + ": " + name + " is given more than once");
    ++o->seen_;
    if (o->kind_ == Option::Kind::flag) {
      if (equals != std::string::npos) throw UsageError(name_ + ": " + name + " takes no value, got '" + arg + "'");
      o->set_flag_();
      continue;
    }
    int count = 0;
    if (equals != std::string::npos) {
      o->take(name_, arg.substr(equals + 1));
      ++count;
    }
    // Values follow until the option has its count, or, for a list, up to the next option.
    while ((o->max_values_ < 0 || count < o->max_values_) && i + 1 < args.size() &&
           (count < o->min_values_ || !looks_like_option(args[i + 1]))) {
      if (looks_like_option(args[i + 1])) break;
      o->take(name_, args[++i]);
      ++count;
    }
    if (count < o->min_values_) {
      const std::string got = count == 0 ? "nothing" : std::to_string(count);
      const std::string what = o->min_values_ == 1 ? o->expected() : std::to_string(o->min_values_) + " values";
      throw UsageError(name_ + ": " + o->display() + " expects " + what + ", got " + got);
    }
  }
  check_relations();
  return true;
}

void Command::check_relations() const {
  for (const Option& o : options_) {
    if (o.required_ && !o.given()) throw UsageError(name_ + ": " + o.display() + " is required");
    if (!o.given()) continue;
    for (const Option* other : o.needs_) {
      if (!other->given()) throw UsageError(name_ + ": " + o.name_ + " needs " + other->name_);
    }
    for (const Option* other : o.excludes_) {
      if (other->given()) throw UsageError(name_ + ": " + o.name_ + " and " + other->name_ + " cannot be combined");
    }
  }
}

std::string Command::help_text() const {
  std::string usage = "usage: " + program_ + " " + name_ + " [OPTIONS]";
  std::string body;
  for (const Option& o : options_) {
    if (o.kind_ == Option::Kind::positional) {
      usage += " [" + o.display() + "]";
      body += entry(o.display(), o.help_);
      continue;
    }
    std::vector<std::string> notes;
    if (o.required_) notes.push_back("required");
    if (o.min_ && o.max_) {
      notes.push_back(std::to_string(*o.min_) + " to " + std::to_string(*o.max_));
    }
    if (!o.default_text_.empty()) notes.push_back("default " + o.default_text_);
    body += entry(o.display(), o.help_ + (notes.empty() ? "" : "; " + join(notes, ", ")));
  }
  body += entry("-h, --help", "this help");
  return usage + "\n\n" + wrap(help_, 0, kHelpWidth) + "\n\noptions:\n" + body;
}

Parser::Parser(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

Command& Parser::command(const std::string& name, const std::string& help) {
  return commands_.emplace_back(program_, name, help);
}

void Parser::exit_status(int code, const std::string& meaning) { exit_statuses_.emplace_back(code, meaning); }

std::string Parser::help_text() const {
  std::string text = wrap(description_, 0, kHelpWidth) + "\n\nusage: " + program_ + " COMMAND [OPTIONS]\n" +
                     "       " + program_ + " --version | --help\n\ncommands:\n";
  for (const Command& c : commands_) text += entry(c.name(), c.summary());
  text += "\n'" + program_ + " COMMAND --help' lists a command's options.\n";
  if (!exit_statuses_.empty()) text += "\nexit status:\n";
  for (const auto& [code, meaning] : exit_statuses_) text += entry(std::to_string(code), meaning);
  return text;
}

Parser::Result Parser::parse(const std::vector<std::string>& args) {
  Result result;
  result.help_text = help_text();
  if (args.empty()) return result;
  const std::string& first = args[0];
  if (first == "-h" || first == "--help") {
    result.action = Action::help;
    return result;
  }
  if (first == "--version") {
    if (args.size() > 1) throw UsageError("--version takes no arguments, got '" + args[1] + "'");
    result.action = Action::version;
    return result;
  }
  std::vector<std::string> names;
  for (const Command& c : commands_) names.push_back(c.name());
  const std::string see = " (" + program_ + " --help)";
  if (looks_like_option(first)) {
    throw UsageError("unknown option '" + first + "'; before a command only --help and --version" + see);
  }
  for (Command& c : commands_) {
    if (c.name() != first) continue;
    result.command = &c;
    if (c.parse(std::vector<std::string>(args.begin() + 1, args.end()))) {
      result.action = Action::run;
    } else {
      result.action = Action::help;
      result.help_text = c.help_text();
    }
    return result;
  }
  throw UsageError("unknown command '" + first + "'; commands: " + join(names, ", ") + see);
}

}  // namespace gemmkit::tools::args
