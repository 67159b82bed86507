// The scan that keeps a kernel source from making the compiler read a file
// outside its workspace (sandbox/source_scan.h). Every spelling below was
// checked against g++ 12 by hand: each one makes it open the named file
// (and quote it in diagnostics, or embed it), so each must be refused; the
// honest sources at the end must all pass.
#include "sandbox/source_scan.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kernelrl::sandbox {
namespace {

TEST(SourceScanTest, EveryWayToReadAFileIsRefused) {
  const std::vector<std::string> attacks = {
      "#include \"/etc/shadow\"\n",
      "#include </etc/shadow>\n",
      "  #  include \"../../other-job/workspace/notes.txt\"\n",
      "#include_next \"/etc/shadow\"\n",
      "#import \"/etc/shadow\"\n",
      "%:include \"/etc/shadow\"\n",             // digraph for '#'
      "?\?=include \"/etc/shadow\"\n",            // trigraph for '#'
      "#/* comment */include \"/etc/shadow\"\n",  // a comment is one space
      "#in\\\nclude \"/etc/shadow\"\n",          // line splice inside the name
      "#include \\\n \"/etc/shadow\"\n",
      "#include /*\n*/ \"/etc/shadow\"\n",       // block comment across lines
      "#include SECRET_HEADER\n",                // computed
      "#embed \"/etc/shadow\"\n",
      "const char d[] = {\n#embed \"notes.txt\"\n};\n",
      "#if __has_embed(\"x\")\n#endif\n",
      "#line 1 \"/etc/shadow\"\nint x = ;\n",     // diagnostics quote the named file
      "# 1 \"/etc/shadow\"\nint x = ;\n",         // GNU line marker
      "#pragma GCC dependency \"/etc/shadow\"\n",
      "_Pragma(\"GCC dependency \\\"/etc/shadow\\\"\")\n",
      "#if __has_include(\"/root/.ssh/id_rsa\")\n#endif\n",
      "#if __has_include(<../secret.h>)\n#endif\n",
      "asm(\".incbin \\\"/etc/shadow\\\"\");\n",
      "__asm__(\".include \\\"/etc/shadow\\\"\");\n",
      "asm(\".inc\" \"bin \\\"/etc/shadow\\\"\");\n",   // adjacent literals concatenate
      "asm(\".inc\"\n    \"lude \\\"/etc/shadow\\\"\");\n",
      "asm(\"\\x2eincbin \\\"/etc/shadow\\\"\");\n",    // '.' as an escape
      "asm(\"\\56INCBIN \\\"/etc/shadow\\\"\");\n",     // octal escape, upper case
      "asm(R\"(.incbin \"/etc/shadow\")\");\n",        // raw string
      "#define S(x) #x\nasm(S(.incbin \"/etc/shadow\"));\n",  // stringized
      "int n = 1'000; asm(\".incbin \\\"/etc/shadow\\\"\");\n",  // digit separator
      "#include <sys/socket.h>\n",
      "#include <thread>\n",
  };
  for (const std::string& src : attacks) {
    EXPECT_NE(ForbiddenSourceConstruct(src), "") << src;
  }
}

TEST(SourceScanTest, HonestSourcesPass) {
  const std::vector<std::string> honest = {
      "#include <cuda_runtime.h>\n#include <cmath>\n#include \"common.cuh\"\n#include \"kernels/util.h\"\n",
      "#include <cstdint>\n#if __has_include(<cuda_fp16.h>)\n#include <cuda_fp16.h>\n#endif\n",
      // Inline PTX is fine: ptxas reads no files.
      "__device__ unsigned lane() { unsigned r; asm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(r)); return r; }\n",
      // Words that only look like the directives.
      "// we #include nothing from /etc here\nint include_count = 1'000'000;\nconst char* s = \"#include </etc/x>\";\n",
      "/* #line 1 \"/etc/shadow\" in a comment */\n#line 20\nint x;\n",
      "#pragma unroll\n#pragma once\n",
      "const char c = '\"'; const char* t = \"'\";\n",
  };
  for (const std::string& src : honest) {
    EXPECT_EQ(ForbiddenSourceConstruct(src), "") << src;
  }
}

TEST(SourceScanTest, SourcesInPythonStringsAreScannedToo) {
  const std::vector<std::string> attacks = {
      "cuda_src = '''\n#include \"/etc/shadow\"\n'''\n",
      "cuda_src = \"#include \\\"/etc/shadow\\\"\\n__global__ void k() {}\"\n",
      "src = '%:include \"../../other/notes.txt\"'\n",
      "src = '#embed \"x\"'\n",
      "src = 'asm(\".incbin \\\\\"/etc/shadow\\\\\"\");'\n",
  };
  for (const std::string& py : attacks) EXPECT_NE(ForbiddenEmbeddedSource(py), "") << py;
  for (const std::string& py : {std::string("# include the bias term\nimport torch\n"),
                                std::string("src = '#include <torch/extension.h>\\n'\n")}) {
    EXPECT_EQ(ForbiddenEmbeddedSource(py), "") << py;
  }
}

}  // namespace
}  // namespace kernelrl::sandbox
