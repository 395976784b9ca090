// Private: source lines from DWARF (dwarf_lines.cpp), used by the symbolizer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kthost/common/result.h"

namespace kt {

class DwarfLines {
 public:
  static Result<std::unique_ptr<DwarfLines>> open(const std::string& path, uint64_t runtime_stext);
  std::optional<std::string> line(uint64_t runtime_ip) const;
  ~DwarfLines();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

}  // namespace kt
