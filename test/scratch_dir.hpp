// A test program's scratch folder under the temporary directory, named
// after it and its pid, removed when the program exits (set
// HETFLOW_KEEP_TEST_FILES to keep it for a look after a failure).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace hetflow::test {

// `prefix` names the folder: PREFIX-PID. The first call fixes it.
inline const std::filesystem::path& scratch_root(const std::string& prefix) {
  struct root_dir {
    std::filesystem::path path;
    ~root_dir() {
      if (std::getenv("HETFLOW_KEEP_TEST_FILES") == nullptr) {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
      }
    }
  };
  static const root_dir r{std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(::getpid()))};
  return r.path;
}

}  // namespace hetflow::test
