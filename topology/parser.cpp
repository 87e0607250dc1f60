// Topology file -> cluster. Reading the file and the byte-level checks (size,
// NUL, UTF-8, key depth) live here; TOML syntax is toml++'s job; the semantic
// checks are detail::check_document (document_check.cpp). File-level problems
// are one diagnostic at {0,0} (printed as 1:1); byte-level ones point at the
// offending byte.
#include "topology/parser.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "topology/document_check.hpp"

namespace hetflow::topology {

namespace fs = std::filesystem;

std::string format(const diagnostic& d) {
  const uint32_t line = d.where.line == 0 ? 1 : d.where.line;
  const uint32_t col = d.where.line == 0 ? 1 : (d.where.column == 0 ? 1 : d.where.column);
  return d.file + ":" + std::to_string(line) + ":" + std::to_string(col) + ": error: " + d.message;
}

uint64_t fnv1a64(std::span<const std::byte> bytes) noexcept {
  uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte b : bytes) {
    h ^= static_cast<uint64_t>(b);
    h *= 0x100000001b3ull;
  }
  return h;
}

namespace {

source_loc loc(const toml::source_region& r) { return detail::to_source_loc(r); }

// ---------------------------------------------------------------- bytes

source_loc position_of(std::string_view text, size_t offset) {
  source_loc w{1, 1};
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    const auto u = static_cast<unsigned char>(text[i]);
    if (u == '\n') {
      ++w.line;
      w.column = 1;
    } else if ((u & 0xC0) != 0x80) {
      ++w.column;  // count code points, as toml++ does
    }
  }
  return w;
}

// Offset of the first byte that is not part of a valid UTF-8 sequence, or npos.
size_t first_invalid_utf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return i;
    if (i + len > n) return i;
    for (size_t j = 1; j < len; ++j) {
      const auto cc = static_cast<unsigned char>(s[i + j]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

// toml++ recurses once per key part ("a.b.c" is three tables deep) when it
// builds and destroys the document, and does not bound dotted keys the way it
// bounds nested arrays/inline tables (TOML_MAX_NESTED_VALUES = 256). An 8 MiB
// "a.a.a...= 1" overflows the stack, so refuse long dotted chains first.
// Scans outside strings and comments; a run of key parts joined by '.' (with
// optional blanks) longer than `max_key_parts` is refused. Floats and dates
// have at most one '.' per run, so they never trip it. Returns the offset of the
// offending '.', or npos.
constexpr size_t max_key_parts = 64;

size_t find_overlong_key(std::string_view s) {
  size_t dots = 0;  // dots in the current run
  size_t i = 0;
  const size_t n = s.size();
  auto skip_basic = [&](bool multi) {  // i is just past the opening quote(s)
    while (i < n) {
      const char c = s[i];
      if (c == '\\') {
        i += 2;
        continue;
      }
      if (multi) {
        if (s.compare(i, 3, "\"\"\"") == 0) {
          i += 3;
          return;
        }
      } else if (c == '"' || c == '\n') {
        ++i;
        return;
      }
      ++i;
    }
  };
  auto skip_literal = [&](bool multi) {
    while (i < n) {
      if (multi ? s.compare(i, 3, "'''") == 0 : (s[i] == '\'' || s[i] == '\n')) {
        i += multi ? 3 : 1;
        return;
      }
      ++i;
    }
  };
  while (i < n) {
    const char c = s[i];
    if (c == '.') {
      if (++dots >= max_key_parts) return i;
      ++i;
    } else if (c == '"') {
      const bool multi = s.compare(i, 3, "\"\"\"") == 0;
      i += multi ? 3 : 1;
      skip_basic(multi);
    } else if (c == '\'') {
      const bool multi = s.compare(i, 3, "'''") == 0;
      i += multi ? 3 : 1;
      skip_literal(multi);
    } else if (c == '#') {
      while (i < n && s[i] != '\n') ++i;
      dots = 0;
    } else if (c == ' ' || c == '\t' || c == '_' || c == '-' || (c >= '0' && c <= '9') ||
               (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      ++i;  // still inside a run of key parts
    } else {
      dots = 0;  // '=', brackets, braces, commas, newlines end a run
      ++i;
    }
  }
  return std::string_view::npos;
}

std::string limit_text() { return format_size(max_topology_bytes); }

parse_result single(std::string file, source_loc where, std::string message) {
  parse_result r;
  r.errors.push_back(diagnostic{std::move(file), where, std::move(message)});
  return r;
}

}  // namespace

parse_result parse_topology(std::string_view text, const fs::path& file_for_messages,
                            const catalog& cat) {
  const std::string file = file_for_messages.string();
  if (text.size() > max_topology_bytes) {
    return single(file, {}, "topology file is " + std::to_string(text.size()) +
                                " bytes; the limit is " + limit_text());
  }
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return single(file, {},
                  "file is empty; a topology needs [cluster], [[nodes]] and [job]");
  }
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return single(file, position_of(text, nul),
                  "file contains a NUL byte; a topology file is UTF-8 text (is this a binary "
                  "file?)");
  }
  if (size_t bad = first_invalid_utf8(text); bad != std::string_view::npos) {
    static const char hex[] = "0123456789ABCDEF";
    const auto b = static_cast<unsigned char>(text[bad]);
    std::string byte = "0x";
    byte += hex[b >> 4];
    byte += hex[b & 15];
    return single(file, position_of(text, bad),
                  "file is not valid UTF-8 (byte " + byte +
                      "); a topology file is UTF-8 text (is this a binary file?)");
  }

  if (size_t at = find_overlong_key(text); at != std::string_view::npos) {
    return single(file, position_of(text, at),
                  "key has more than " + std::to_string(max_key_parts) +
                      " dotted parts; topology keys are nested a few levels at most");
  }

  toml::table root;
  try {
    root = toml::parse(text, std::string_view(file));
  } catch (const toml::parse_error& e) {
    return single(file, loc(e.source()), "invalid TOML: " + std::string(e.description()));
  } catch (const std::exception& e) {
    // toml++ throws only parse_error; anything else (bad_alloc) is still the
    // file's fault from the user's point of view, and must not kill the caller.
    return single(file, {}, std::string("cannot parse topology file: ") + e.what());
  }

  if (root.empty()) {
    return single(file, {},
                  "file has no keys or tables; a topology needs [cluster], [[nodes]] and [job]");
  }

  std::error_code ec;
  fs::path abs = fs::absolute(file_for_messages, ec);
  if (ec) abs = file_for_messages;
  abs = abs.lexically_normal();

  parse_result r;
  cluster c = detail::check_document(root, cat, file, abs.parent_path(), r.errors);
  std::stable_sort(r.errors.begin(), r.errors.end(), [](const diagnostic& a, const diagnostic& b) {
    if (a.where.line != b.where.line) return a.where.line < b.where.line;
    return a.where.column < b.where.column;
  });
  if (!r.errors.empty()) return r;
  c.file = abs;
  c.content_hash = fnv1a64(std::as_bytes(std::span<const char>(text.data(), text.size())));
  r.model = std::move(c);
  return r;
}

parse_result load_topology(const fs::path& file, const catalog& cat) {
  const std::string name = file.string();
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat below rejects it.
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return single(name, {}, "topology file not found");
    return single(name, {}, std::string("cannot open topology file: ") + std::strerror(err));
  }
  struct fd_closer {
    int fd;
    ~fd_closer() { ::close(fd); }
  } closer{fd};
  struct stat st{};
  if (::fstat(fd, &st) != 0)
    return single(name, {}, std::string("cannot stat topology file: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    return single(name, {}, "is a directory, not a topology file");
  if (!S_ISREG(st.st_mode))
    return single(name, {},
                  "is not a regular file (a device, FIFO or socket); a topology is a TOML file");
  if (static_cast<uint64_t>(st.st_size) > max_topology_bytes) {
    return single(name, {}, "topology file is " + std::to_string(st.st_size) +
                                " bytes; the limit is " + limit_text());
  }
  // Read at most limit + 1 bytes: files in /proc report size 0, and a file may
  // grow between fstat and read.
  std::string text;
  text.resize(static_cast<size_t>(st.st_size) + 1);
  size_t used = 0;
  for (;;) {
    if (used == text.size()) {
      if (text.size() > max_topology_bytes) break;
      text.resize(std::min<size_t>(text.size() * 2 + 4096, max_topology_bytes + 1));
    }
    const ssize_t got = ::read(fd, text.data() + used, text.size() - used);
    if (got < 0) {
      if (errno == EINTR) continue;
      return single(name, {}, std::string("cannot read topology file: ") + std::strerror(errno));
    }
    if (got == 0) break;
    used += static_cast<size_t>(got);
  }
  text.resize(used);
  if (used > max_topology_bytes) {
    return single(name, {}, "topology file is more than " + std::to_string(max_topology_bytes) +
                                " bytes; the limit is " + limit_text());
  }
  return parse_topology(text, file, cat);
}

std::vector<plugin_entry> scan_plugins(const fs::path& file) {
  std::vector<plugin_entry> out;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return out;
  const auto size = fs::file_size(file, ec);
  if (ec || size == 0 || size > max_topology_bytes) return out;
  std::string text(static_cast<size_t>(size), '\0');
  {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return out;
    size_t used = 0;
    while (used < text.size()) {
      const ssize_t got = ::read(fd, text.data() + used, text.size() - used);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      used += static_cast<size_t>(got);
    }
    ::close(fd);
    text.resize(used);
  }
  // The same byte checks as parse_topology: toml++ must never see a file
  // that could overflow its stack.
  if (text.find('\0') != std::string::npos || first_invalid_utf8(text) != std::string_view::npos ||
      find_overlong_key(text) != std::string_view::npos)
    return out;
  toml::table root;
  try {
    root = toml::parse(text, file.string());
  } catch (const std::exception&) {
    return out;
  }
  const toml::table* cl = root["cluster"].as_table();
  const toml::array* arr = cl ? (*cl)["plugins"].as_array() : nullptr;
  if (!arr) return out;
  fs::path base = fs::absolute(file, ec);
  if (ec) base = file;
  base = base.lexically_normal().parent_path();
  for (const toml::node& e : *arr) {
    const auto* str = e.as_string();
    if (!str || str->get().empty()) continue;
    fs::path rel(str->get());
    fs::path abs = (rel.is_absolute() ? rel : base / rel).lexically_normal();
    if (!fs::is_regular_file(abs, ec)) continue;
    out.push_back(plugin_entry{str->get(), abs, loc(e.source())});
  }
  return out;
}

}  // namespace hetflow::topology
