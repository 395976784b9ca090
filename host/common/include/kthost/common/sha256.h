// SHA-256 (FIPS 180-4), for content checks of guest text and bundle files.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kt {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t len);
  std::array<uint8_t, 32> finish();
  // Lowercase hex digest of `data`.
  static std::string hex_digest(const void* data, size_t len);

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

}  // namespace kt
