// The CLI's argument parser: a program of subcommands, each with typed options, flags and
// positionals declared against the variables they fill. Usage mistakes throw UsageError with one
// line naming the argument and what was expected; --help (-h) asks for a command's help text.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace gemmkit::tools::args {

// A command line the parser cannot accept; what() is one line without the program's prefix.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One option, flag or positional of a command, bound to the variable it fills.
class Option {
 public:
  // Builders, chained after Command::option and friends.
  Option& required();
  // The accepted range of an integer option (inclusive).
  Option& range(int64_t min, int64_t max);
  Option& at_least(int64_t min);
  // How many values the option takes: `count` exactly (--hint-matrix N K).
  Option& values(int count);
  // What the help shows for the value, e.g. "FILE"; the type gives one otherwise.
  Option& metavar(std::string name);
  // Shows the variable's value at declaration as the default in the help.
  Option& show_default();
  // Given together with `other`: a usage error (both ways).
  Option& excludes(Option& other);
  // Given without `other`: a usage error.
  Option& needs(Option& other);

  const std::string& name() const { return name_; }
  bool given() const { return seen_ > 0; }

 private:
  friend class Command;
  enum class Kind { value, flag, positional };

  Kind kind_ = Kind::value;
  std::string name_;  // "--suite"; a positional's name, e.g. "shape"
  std::string help_;
  std::string metavar_;
  std::string initial_;       // the variable's value at declaration, as text
  std::string default_text_;  // shown in the help where set
  bool required_ = false;
  int min_values_ = 1, max_values_ = 1;  // max -1: any number
  bool integer_ = false, number_ = false;
  std::optional<int64_t> min_, max_;
  // Parses and stores one value; returns false where the text is not of the option's type.
  std::function<bool(const std::string&)> store_;
  std::function<void()> set_flag_;
  std::vector<const Option*> excludes_, needs_;
  int seen_ = 0;

  std::optional<int64_t> integer(const std::string& text) const;  // the text as an integer in range
  std::string expected() const;  // "an integer from 20 to 100000"
  std::string display() const;   // "--runs N"
  void take(const std::string& command, const std::string& value);
};

class Command {
 public:
  Command(std::string program, std::string name, std::string help);

  Option& option(const std::string& name, std::string& target, const std::string& help);
  Option& option(const std::string& name, int& target, const std::string& help);
  Option& option(const std::string& name, int64_t& target, const std::string& help);
  Option& option(const std::string& name, float& target, const std::string& help);
  // One or more values (--chain a.txt b.txt), or exactly values(n); repeating the option appends.
  Option& option(const std::string& name, std::vector<std::string>& target, const std::string& help);
  Option& option(const std::string& name, std::vector<int64_t>& target, const std::string& help);
  Option& flag(const std::string& name, bool& target, const std::string& help);
  // Up to `max` arguments that are not options, in order.
  Option& positionals(const std::string& name, std::vector<std::string>& target, int max, const std::string& help);

  const std::string& name() const { return name_; }
  const std::string& summary() const { return help_; }
  std::string help_text() const;

  // Fills the bound variables from `args` (the arguments after the command's name). Returns
  // false where they ask for help (--help or -h); throws UsageError otherwise.
  bool parse(const std::vector<std::string>& args);

 private:
  std::string program_, name_, help_;
  std::deque<Option> options_;  // a deque: the references handed out stay valid

  Option& add(const std::string& name, const std::string& help, const std::string& metavar, const std::string& initial);
  // An option of integer type T; a value outside T's range or the option's is malformed.
  template <typename T>
  Option& integer_option(const std::string& name, T& target, const std::string& help);
  Option* find(const std::string& name);
  void check_relations() const;
};

class Parser {
 public:
  Parser(std::string program, std::string description);

  Command& command(const std::string& name, const std::string& help);
  // A line of the help's "exit status" section: what `code` means.
  void exit_status(int code, const std::string& meaning);

  enum class Action {
    run,      // run command()
    help,     // print help_text: the program's or a command's (exit 0)
    version,  // --version (exit 0)
    usage,    // no command: print help_text to stderr (exit 2)
  };
  struct Result {
    Action action = Action::usage;
    Command* command = nullptr;
    std::string help_text;
  };
  // Parses the arguments after the program's name; throws UsageError.
  Result parse(const std::vector<std::string>& args);

  std::string help_text() const;

 private:
  std::string program_, description_;
  std::deque<Command> commands_;
  std::vector<std::pair<int, std::string>> exit_statuses_;
};

}  // namespace gemmkit::tools::args
