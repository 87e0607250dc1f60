// suggest: "did you mean 'X'?" for misspelt names (keys, job kinds, actor types,
// node names). Plain functions; the CLI may reuse them for subcommand names.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace hetflow::topology {

// Optimal-string-alignment distance (Levenshtein plus adjacent transpositions),
// case-sensitive.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`: a case-insensitive equal match wins; else the
// smallest edit distance that is <= 2 and smaller than both lengths (so "id"
// does not "match" "ip" by replacing everything); else the only candidate that
// starts with `word` or that `word` starts with (both at least 4 long).
// Ties go to the first candidate.
std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string> candidates);

// "; did you mean 'X'?" or "" — ready to append to a message.
std::string did_you_mean(std::string_view word, std::span<const std::string> candidates);

}  // namespace hetflow::topology
