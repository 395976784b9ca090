// Result<T>: a value or an Error. Errors are values in kthost; exceptions are
// not used for control flow. An Error says what failed, where and why.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kt {

// What kind of failure. Callers branch on this, people read `message`.
enum class ErrorCode {
  Io,             // a system call failed; message carries errno text and the path
  InvalidInput,   // untrusted bytes (guest, file, peer) were malformed
  InvalidArgument,// the caller (user or code) asked for something impossible
  NotPresent,     // a page-table entry or mapping is not present
  NonCanonical,   // a virtual address is not canonical for the paging mode
  ReservedBits,   // a page-table entry has reserved bits set
  OutOfRange,     // an address or length points outside what exists (guest RAM, a file)
  Cycle,          // a structure refers back to itself (page-table loop)
  LimitExceeded,  // a bound that protects memory or time was hit
  Timeout,        // a peer did not answer in time
  Protocol,       // a peer spoke the protocol wrongly or returned an error
  Unsupported,    // this machine or guest lacks a feature
};

const char* error_code_name(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::InvalidInput;
  std::string message;

  Error() = default;
  Error(ErrorCode c, std::string msg) : code(c), message(std::move(msg)) {}

  // Prefixes context, e.g. err.with_context("reading /proc/123/mem").
  Error with_context(std::string_view context) const {
    return Error(code, std::string(context) + ": " + message);
  }
  std::string describe() const { return message; }
};

// Builds an Io error from errno with the operation and path.
Error io_error(std::string_view what, int err);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Error error) : data_(std::move(error)) {}      // NOLINT: implicit by design

  bool ok() const { return data_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(data_); }
  const T& value() const& { return std::get<0>(data_); }
  T&& value() && { return std::get<0>(std::move(data_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(data_); }
  Error take_error() { return std::get<1>(std::move(data_)); }

 private:
  std::variant<T, Error> data_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }
  Error take_error() { return std::move(error_); }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

inline Status ok_status() { return Status(); }

}  // namespace kt

// Propagates an error from an expression returning Result<...>.
#define KT_TRY(expr)                                   \
  do {                                                 \
    auto kt_try_result_ = (expr);                      \
    if (!kt_try_result_) return kt_try_result_.take_error(); \
  } while (0)

// Assigns the value of a Result to `lhs` or returns its error.
#define KT_CONCAT_INNER(a, b) a##b
#define KT_CONCAT(a, b) KT_CONCAT_INNER(a, b)
#define KT_ASSIGN_OR_RETURN(lhs, expr) \
  KT_ASSIGN_OR_RETURN_IMPL(KT_CONCAT(kt_result_, __LINE__), lhs, expr)
#define KT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp) return tmp.take_error();             \
  lhs = std::move(tmp).value()
