// What a kernel source may not ask the compiler to read. The compile stage
// runs in a constructed root that holds nothing secret (docs/SANDBOX.md,
// "Filesystem view and identity"), so this scan is the first of two layers:
// it refuses, before anything runs, the constructs that make the
// preprocessor, the compiler or the assembler open a file outside the
// workspace and quote it back in diagnostics or embed it in the binary:
//   - #include / #include_next / #import of an absolute path or one with
//     "..", computed includes, and the forbidden system headers;
//   - #embed and __has_embed (a file's bytes into the program);
//   - #line / GNU line markers naming a file (diagnostics quote the named
//     file's lines as source context);
//   - #pragma GCC dependency and _Pragma("GCC dependency ...");
//   - __has_include of an absolute or ".." path (an existence oracle);
//   - the assembler's .incbin and .include in inline asm strings, and the
//     identifier incbin anywhere (stringized asm).
// Directives are recognised after line splicing (backslash-newline), with
// comments removed and with the digraph %: and the trigraph ??= as "#".
// Token pasting can still spell ".incbin" past any text scan: the
// constructed root is what makes that read find nothing.
#ifndef KERNELRL_SANDBOX_SOURCE_SCAN_H_
#define KERNELRL_SANDBOX_SOURCE_SCAN_H_

#include <string>
#include <vector>

namespace kernelrl::sandbox {

// Empty when the C/C++/CUDA `source` has none of the constructs above, else
// the first one and why.
std::string ForbiddenSourceConstruct(const std::string& source);

// The file-reading constructs (not the header list: Python comments start
// with '#') found anywhere in a Python file, for the C/C++ sources a
// SINGLE_FILE_INLINE workspace hands load_inline in strings. Empty when none.
std::string ForbiddenEmbeddedSource(const std::string& python_source);

// The headers a candidate may not include: a prefix ending in '/' forbids a
// directory, any other entry exactly that header.
const std::vector<std::string>& ForbiddenIncludePrefixes();

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_SOURCE_SCAN_H_
