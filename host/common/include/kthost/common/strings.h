// Small string helpers: hex formatting and strict number parsing of untrusted text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kthost/common/result.h"

namespace kt {

// "0xffffffff81000000"
std::string hex(uint64_t value);
// Lowercase hex of a byte buffer, no separators.
std::string hex_bytes(const void* data, size_t len);
// Parses lowercase/uppercase hex bytes ("0f1f44"); nullopt on odd length or bad digit.
std::optional<std::vector<uint8_t>> parse_hex_bytes(std::string_view text);
// Parses an unsigned integer; accepts a 0x prefix for hex when base==0.
// Rejects empty input, trailing garbage and overflow.
std::optional<uint64_t> parse_u64(std::string_view text, int base = 0);
// Human size: "12.3 MiB".
std::string human_bytes(uint64_t bytes);
// "10G", "512M", "64K", "1000": bytes (binary units; an option's value).
// Errors: InvalidArgument naming `what` and the text.
Result<uint64_t> parse_byte_size(const std::string& text, const std::string& what);
std::vector<std::string_view> split(std::string_view text, char sep);
std::string_view trim(std::string_view text);
bool starts_with(std::string_view text, std::string_view prefix);
// Replaces bytes that are not printable ASCII with '?', and caps the length,
// so that untrusted names never reach a terminal raw.
std::string sanitize_name(std::string_view text, size_t max_len = 256);
// Text for an XML attribute or element: & < > " ' escaped; control bytes
// (but newline and tab when keep_lines) and non-ASCII bytes become '?', so
// untrusted names never make the document ill-formed.
std::string xml_escape(std::string_view text, bool keep_lines = false);

}  // namespace kt
