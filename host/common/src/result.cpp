#include "kthost/common/result.h"

#include <cstring>

namespace kt {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::Io: return "io";
    case ErrorCode::InvalidInput: return "invalid-input";
    case ErrorCode::InvalidArgument: return "invalid-argument";
    case ErrorCode::NotPresent: return "not-present";
    case ErrorCode::NonCanonical: return "non-canonical";
    case ErrorCode::ReservedBits: return "reserved-bits";
    case ErrorCode::OutOfRange: return "out-of-range";
    case ErrorCode::Cycle: return "cycle";
    case ErrorCode::LimitExceeded: return "limit-exceeded";
    case ErrorCode::Timeout: return "timeout";
    case ErrorCode::Protocol: return "protocol";
    case ErrorCode::Unsupported: return "unsupported";
  }
  return "unknown";
}

Error io_error(std::string_view what, int err) {
  return Error(ErrorCode::Io, std::string(what) + ": " + std::strerror(err));
}

}  // namespace kt
