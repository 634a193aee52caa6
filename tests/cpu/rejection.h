// The argument checks' tests share one expectation: a call rejected with invalid_argument, its
// message starting with the argument's name and quoting what was given (and, where
// `says_expected`, saying what was expected).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "gemmkit/error.h"

namespace gemmkit::testing {

inline void expect_invalid_argument(const std::function<void()>& call, const std::string& argument,
                                    std::initializer_list<std::string> given, bool says_expected = true) {
  try {
    call();
    ADD_FAILURE() << "the arguments were accepted; expected an error about " << argument;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << message;
    EXPECT_EQ(message.rfind(argument, 0), 0u) << "message does not start with '" << argument << "': " << message;
    if (says_expected) EXPECT_NE(message.find("expected"), std::string::npos) << message;
    for (const std::string& part : given) {
      EXPECT_NE(message.find(part), std::string::npos) << "message lacks '" << part << "': " << message;
    }
  }
}

}  // namespace gemmkit::testing
