// A temporary directory tree for tests that need files (fake sysfs, procfs,
// debugfs), removed at the end of the test.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace kt::testing {

class TempTree {
 public:
  TempTree() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kthost-pt-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    root_ = pattern;
  }
  ~TempTree() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  const std::string& root() const { return root_; }
  std::string path(const std::string& rel) const { return root_ + "/" + rel; }

  // Writes a file, creating its directories.
  void write(const std::string& rel, const std::string& content) const {
    std::filesystem::path p = path(rel);
    std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << content;
  }
  void mkdir(const std::string& rel) const { std::filesystem::create_directories(path(rel)); }
  void copy(const std::string& from, const std::string& rel) const {
    std::filesystem::create_directories(std::filesystem::path(path(rel)).parent_path());
    std::filesystem::copy(from, path(rel), std::filesystem::copy_options::recursive);
  }

 private:
  std::string root_;
};

}  // namespace kt::testing
