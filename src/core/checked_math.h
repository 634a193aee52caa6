// Size arithmetic that cannot overflow unnoticed: products of int64 sizes, checked, and the
// exact value of one too large for 64 bits, for messages.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace gemmkit {

// a / b rounded up, for a >= 0 and b > 0 (sizes, which check_addressable keeps far from overflow).
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The product of non-negative `factors`, or nullopt where it does not fit in int64. Zero where
// any factor is zero, however large the others.
inline std::optional<int64_t> checked_product(std::initializer_list<int64_t> factors) {
  for (int64_t f : factors) {
    if (f == 0) return 0;
  }
  int64_t product = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) return std::nullopt;
  }
  return product;
}

// a + b, or nullopt where it does not fit in int64.
inline std::optional<int64_t> checked_sum(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

// The exact product of non-negative `factors` as text: "2^64" where it is a power of two of
// at least 2^32, else its decimal digits; "more than 2^127" past 128 bits.
inline std::string product_text(std::initializer_list<int64_t> factors) {
  unsigned __int128 product = 1;
  for (int64_t f : factors) {
    if (f == 0) return "0";
  }
  for (int64_t f : factors) {
    const auto factor = static_cast<unsigned __int128>(f);
    if (product > ~static_cast<unsigned __int128>(0) / factor) return "more than 2^127";
    product *= factor;
  }
  if ((product & (product - 1)) == 0 && product >> 32 != 0) {
    int exponent = 0;
    while (product >>= 1) ++exponent;
    return "2^" + std::to_string(exponent);
  }
  std::string digits;
  do {
    digits.insert(digits.begin(), char('0' + int(product % 10)));
    product /= 10;
  } while (product != 0);
  return digits;
}

}  // namespace gemmkit
