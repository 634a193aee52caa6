#include "tools/args.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace gemmkit::tools::args;

namespace {

// A program like the CLI: a command with every kind of option, and a second one.
struct Program {
  Parser parser{"prog", "a test program"};
  std::string suite = "dense-large", name;
  int runs = 30;
  int64_t batch = 1;
  float beta = 0;
  bool overhead = false;
  std::vector<std::string> chains, shape;
  std::vector<int64_t> pair;
  Command* bench = nullptr;

  Program() {
    bench = &parser.command("bench", "time things");
    bench->option("--suite", suite, "suite name or file").metavar("NAME|FILE").show_default();
    bench->option("--runs", runs, "timed runs").range(20, 100000).show_default();
    bench->option("--batch", batch, "batch").at_least(1);
    bench->option("--beta", beta, "beta");
    Option& tile = bench->option("--tile", name, "tile");
    Option& flag = bench->flag("--overhead", overhead, "time the host").excludes(tile);
    bench->option("--overhead-shape", name, "shape").needs(flag);
    bench->option("--chain", chains, "chain files").metavar("FILE");
    bench->option("--pair", pair, "two numbers").values(2).at_least(1).metavar("N K");
    Command& verify = parser.command("verify", "check things");
    verify.positionals("shape", shape, 3, "M N K");
    parser.command("tune", "tune things").option("--suite", suite, "suite").required();
  }

  Parser::Result parse(std::vector<std::string> args) { return parser.parse(args); }

  // The UsageError's message for `args`; fails the test where they parse.
  std::string error(std::vector<std::string> args) {
    try {
      parser.parse(args);
    } catch (const UsageError& e) {
      return e.what();
    }
    ADD_FAILURE() << "parsed without an error";
    return "";
  }
};

TEST(Args, NoCommandAsksForTheUsage) {
  Program p;
  const Parser::Result r = p.parse({});
  EXPECT_EQ(r.action, Parser::Action::usage);
  EXPECT_NE(r.help_text.find("bench"), std::string::npos);
}

TEST(Args, UnknownCommandIsNamedWithTheCommands) {
  Program p;
  EXPECT_EQ(p.error({"frobnicate"}), "unknown command 'frobnicate'; commands: bench, verify, tune (prog --help)");
}

TEST(Args, UnknownOptionIsNamed) {
  Program p;
  EXPECT_EQ(p.error({"bench", "--frob", "1"}), "bench: unknown option '--frob' (prog bench --help)");
  EXPECT_EQ(p.error({"bench", "--frob=1"}), "bench: unknown option '--frob' (prog bench --help)");
  EXPECT_NE(p.error({"--frob"}).find("unknown option '--frob'"), std::string::npos);
}

TEST(Args, BadValuesNameTheOptionAndWhatWasExpected) {
  Program p;
  EXPECT_EQ(p.error({"bench", "--runs", "abc"}), "bench: --runs N expects an integer from 20 to 100000, got 'abc'");
  EXPECT_EQ(p.error({"bench", "--runs", "5"}), "bench: --runs N expects an integer from 20 to 100000, got '5'");
  EXPECT_EQ(p.error({"bench", "--runs", "30x"}), "bench: --runs N expects an integer from 20 to 100000, got '30x'");
  EXPECT_EQ(p.error({"bench", "--runs"}), "bench: --runs N expects an integer from 20 to 100000, got nothing");
  EXPECT_EQ(p.error({"bench", "--runs", "--overhead"}), "bench: --runs N expects an integer from 20 to 100000, got nothing");
  EXPECT_EQ(p.error({"bench", "--batch", "0"}), "bench: --batch N expects a positive integer, got '0'");
  EXPECT_EQ(p.error({"bench", "--beta", "x"}), "bench: --beta X expects a number, got 'x'");
  EXPECT_EQ(p.error({"bench", "--pair", "1"}), "bench: --pair N K expects 2 values, got 1");
  EXPECT_EQ(p.error({"bench", "--overhead=yes"}), "bench: --overhead takes no value, got '--overhead=yes'");
  EXPECT_EQ(p.error({"bench", "--runs", "40", "--runs", "50"}), "bench: --runs is given more than once");
}

TEST(Args, ValuesAreStored) {
  Program p;
  const Parser::Result r = p.parse({"bench", "--suite=fp8-large", "--runs", "40", "--beta", "-0.5", "--chain", "a.txt",
                                    "b.txt", "--pair", "7168", "2048", "--chain", "c.txt"});
  ASSERT_EQ(r.action, Parser::Action::run);
  EXPECT_EQ(r.command, p.bench);
  EXPECT_EQ(p.suite, "fp8-large");
  EXPECT_EQ(p.runs, 40);
  EXPECT_EQ(p.beta, -0.5f);
  EXPECT_EQ(p.chains, (std::vector<std::string>{"a.txt", "b.txt", "c.txt"}));
  EXPECT_EQ(p.pair, (std::vector<int64_t>{7168, 2048}));
}

TEST(Args, RequiredExcludesAndNeeds) {
  Program p;
  EXPECT_EQ(p.error({"tune"}), "tune: --suite TEXT is required");
  EXPECT_EQ(p.error({"bench", "--tile", "128x128", "--overhead"}), "bench: --tile and --overhead cannot be combined");
  EXPECT_EQ(p.error({"bench", "--overhead-shape", "1,2,3"}), "bench: --overhead-shape needs --overhead");
  EXPECT_EQ(p.parse({"bench", "--overhead", "--overhead-shape", "1,2,3"}).action, Parser::Action::run);
}

TEST(Args, Positionals) {
  Program p;
  EXPECT_EQ(p.parse({"verify", "1", "2", "3"}).action, Parser::Action::run);
  EXPECT_EQ(p.shape, (std::vector<std::string>{"1", "2", "3"}));
  Program q;
  EXPECT_EQ(q.error({"verify", "1", "2", "3", "4"}), "verify: unexpected argument '4' (shape takes at most 3 values) (prog verify --help)");
  EXPECT_EQ(q.error({"bench", "extra"}), "bench: unexpected argument 'extra' (prog bench --help)");
}

TEST(Args, HelpForTheProgramAndEachCommand) {
  Program p;
  Parser::Result r = p.parse({"--help"});
  EXPECT_EQ(r.action, Parser::Action::help);
  EXPECT_NE(r.help_text.find("usage: prog COMMAND"), std::string::npos) << r.help_text;
  r = p.parse({"bench", "--runs", "40", "-h"});
  EXPECT_EQ(r.action, Parser::Action::help);
  EXPECT_NE(r.help_text.find("usage: prog bench"), std::string::npos) << r.help_text;
  EXPECT_NE(r.help_text.find("--runs N"), std::string::npos) << r.help_text;
  EXPECT_NE(r.help_text.find("20 to 100000, default 30"), std::string::npos) << r.help_text;
  EXPECT_NE(r.help_text.find("default dense-large"), std::string::npos) << r.help_text;
  EXPECT_EQ(p.parse({"--version"}).action, Parser::Action::version);
}

TEST(Args, TheProgramsHelpEndsWithItsExitStatuses) {
  Program p;
  EXPECT_EQ(p.parse({"--help"}).help_text.find("exit status"), std::string::npos);
  p.parser.exit_status(0, "success");
  p.parser.exit_status(2, "a usage error");
  const std::string help = p.parse({"--help"}).help_text;
  const std::string statuses = "\nexit status:\n  0" + std::string(23, ' ') + "success\n  2" + std::string(23, ' ') +
                               "a usage error\n";
  ASSERT_GE(help.size(), statuses.size());
  EXPECT_EQ(help.substr(help.size() - statuses.size()), statuses) << help;
  EXPECT_EQ(p.parse({"bench", "--help"}).help_text.find("exit status"), std::string::npos);
}

}  // namespace
