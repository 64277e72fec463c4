// Shell-style globs for program names: '*' any run of characters, '?' one character, '[abc]', '[a-z]'
// and '[!x]' one character of (not of) a set. Byte-wise and allocation-free (fnmatch converts to wide
// characters in UTF-8 locales, and allocates).
#pragma once

#include <string_view>

namespace tcp2rdma::config {

bool glob_match(std::string_view pattern, std::string_view text);

// False for a pattern glob_match would misread: empty, or an unclosed '['.
bool glob_valid(std::string_view pattern);

}  // namespace tcp2rdma::config
