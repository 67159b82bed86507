// Small text helpers shared by services: UTF-8 encoding of a code point and
// POSIX shell quoting of one argument.
#ifndef KERNELRL_COMMON_TEXT_H_
#define KERNELRL_COMMON_TEXT_H_

#include <cstdint>
#include <string>

namespace kernelrl {

// Appends the UTF-8 encoding of `cp` (1 to 4 bytes; no validation of surrogates).
void AppendUtf8(uint32_t cp, std::string* out);

// 'text' with embedded single quotes escaped, safe as one `sh -c` argument.
std::string ShellQuote(const std::string& text);

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_TEXT_H_
