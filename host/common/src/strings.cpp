#include "kthost/common/strings.h"

#include <charconv>
#include <cinttypes>
#include <cstdio>

namespace kt {

std::string hex(uint64_t value) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, value);
  return buf;
}

std::string hex_bytes(const void* data, size_t len) {
  static const char digits[] = "0123456789abcdef";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out(len * 2, '0');
  for (size_t i = 0; i < len; ++i) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  return out;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::vector<uint8_t>> parse_hex_bytes(std::string_view text) {
  if (text.size() % 2 != 0) return std::nullopt;
  std::vector<uint8_t> out(text.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = hex_digit(text[2 * i]);
    int lo = hex_digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

std::optional<uint64_t> parse_u64(std::string_view text, int base) {
  if (base == 0) {
    base = 10;
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
      text.remove_prefix(2);
      base = 16;
    }
  }
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string human_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

Result<uint64_t> parse_byte_size(const std::string& text, const std::string& what) {
  std::string_view t = trim(text);
  uint64_t mult = 1;
  if (!t.empty()) {
    switch (t.back()) {
      case 'K': case 'k': mult = 1ull << 10; break;
      case 'M': case 'm': mult = 1ull << 20; break;
      case 'G': case 'g': mult = 1ull << 30; break;
      case 'T': case 't': mult = 1ull << 40; break;
      default: break;
    }
    if (mult != 1) t.remove_suffix(1);
  }
  auto v = parse_u64(t, 10);
  if (!v || *v > UINT64_MAX / mult)
    return Error(ErrorCode::InvalidArgument,
                 what + " takes a size in bytes with an optional K, M, G or T (binary) suffix, not '" +
                     sanitize_name(text, 40) + "'");
  return *v * mult;
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t pos = text.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(text.substr(start));
      return out;
    }
    out.push_back(text.substr(start, pos - start));
    start = pos + 1;
  }
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == '\n' ||
                           text.front() == '\r'))
    text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\n' ||
                           text.back() == '\r'))
    text.remove_suffix(1);
  return text;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

std::string sanitize_name(std::string_view text, size_t max_len) {
  std::string out;
  out.reserve(std::min(text.size(), max_len));
  for (char c : text) {
    if (out.size() >= max_len) break;
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  return out;
}

std::string xml_escape(std::string_view text, bool keep_lines) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (keep_lines && (c == '\n' || c == '\t')) out += static_cast<char>(c);
        else out += (c < 0x20 || c >= 0x7f) ? '?' : static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace kt
