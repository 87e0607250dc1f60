#include "actors/log.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace hetflow::actors {
namespace {

std::mutex log_mutex;
std::string node_prefix;
log_level min_level = log_level::info;

const char* level_name(log_level l) {
  switch (l) {
    case log_level::debug: return "debug";
    case log_level::info: return "info";
    case log_level::warn: return "warning";
    case log_level::error: return "error";
  }
  return "?";
}

}  // namespace

void set_log_node_name(std::string name) {
  std::lock_guard<std::mutex> g(log_mutex);
  const char* launched = std::getenv("HETFLOW_LAUNCHED");
  node_prefix = (launched != nullptr && launched[0] == '1') ? std::string{} : "[" + name + "] ";
}

void set_log_level(log_level level) {
  std::lock_guard<std::mutex> g(log_mutex);
  min_level = level;
}

void log(log_level level, std::string_view message) {
  if (level < min_level) return;
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms));
  std::lock_guard<std::mutex> g(log_mutex);
  FILE* out = level >= log_level::warn ? stderr : stdout;
  std::fprintf(out, "%s %s%s: %.*s\n", stamp, node_prefix.c_str(), level_name(level),
               static_cast<int>(message.size()), message.data());
  std::fflush(out);
}

}  // namespace hetflow::actors
