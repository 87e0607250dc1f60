#include "topology/catalog.hpp"

namespace hetflow::topology {

const char* to_string(key_type t) noexcept {
  switch (t) {
    case key_type::boolean: return "boolean";
    case key_type::integer: return "integer";
    case key_type::number: return "number";
    case key_type::string: return "string";
    case key_type::size: return "size";
    case key_type::duration: return "duration";
    case key_type::string_list: return "string_list";
    case key_type::path: return "path";
    case key_type::path_list: return "path_list";
    case key_type::size_list: return "size_list";
    case key_type::table: return "table";
  }
  return "unknown";
}

namespace {
const type_spec* find_in(const std::vector<type_spec>& types, std::string_view name) {
  for (const auto& t : types)
    if (t.name == name) return &t;
  return nullptr;
}
}  // namespace

const type_spec* catalog::find_job_kind(std::string_view name) const {
  return find_in(job_kinds, name);
}

const type_spec* catalog::find_actor_type(std::string_view name) const {
  return find_in(actor_types, name);
}

}  // namespace hetflow::topology
