// Workspace validation: every malformed or hostile workspace maps to a clear
// outcome (BAD_WORKSPACE / SANDBOX_VIOLATION) and layouts are detected.
#include "sandbox/workspace.h"

#include "gtest/gtest.h"

namespace kernelrl::sandbox {
namespace {

Workspace Ws(std::initializer_list<std::pair<std::string, std::string>> files) {
  Workspace ws;
  for (const auto& [path, content] : files) {
    WorkspaceFile* f = ws.add_files();
    f->set_path(path);
    f->set_content(content);
  }
  return ws;
}

struct Checked {
  bool ok;
  ValidatedWorkspace ws;
  WorkspaceRejection why;
};

Checked Check(const Workspace& ws, const std::string& backend = "cuda", WorkspaceLimits limits = {}) {
  Checked c;
  c.ok = ValidateWorkspace(ws, limits, backend, &c.ws, &c.why);
  return c;
}

const char* kModel = "import kernelrl\nclass ModelNew: pass\n";

TEST(WorkspaceTest, DetectsLayouts) {
  EXPECT_EQ(Check(Ws({{"model_new.py", kModel}, {"kernels/a.cu", "__global__ void k(){}"}})).ws.layout,
            Workspace::FAST_PATH);
  EXPECT_EQ(Check(Ws({{"model_new.py", kModel}, {"kernels/a.cu", ""}, {"binding.cpp", "PYBIND11_MODULE(x, m) {}"}})).ws.layout,
            Workspace::TORCH_EXTENSION);
  EXPECT_EQ(Check(Ws({{"model_new.py", "from torch.utils.cpp_extension import load_inline\n"}})).ws.layout,
            Workspace::SINGLE_FILE_INLINE);
  EXPECT_EQ(Check(Ws({{"model_new.py", kModel}, {"kernels/a.cc", ""}}), "cpu").ws.layout, Workspace::CPU);
}

TEST(WorkspaceTest, RejectsPathsThatEscape) {
  for (const char* bad : {"../x.py", "/etc/passwd.py", "a/../../x.py", "a//b.py", "./x.py", ".hidden.py",
                          "a\\b.py", "kernels/a b.cu", "a/b/c/d/e.py"}) {
    Checked c = Check(Ws({{"model_new.py", kModel}, {bad, ""}}));
    EXPECT_FALSE(c.ok) << bad;
    EXPECT_EQ(c.why.outcome, Verdict::BAD_WORKSPACE) << bad;
  }
}

TEST(WorkspaceTest, RejectsMissingOversizedDuplicateAndForeignFiles) {
  EXPECT_NE(Check(Ws({{"kernels/a.cu", ""}})).why.reason.find("model_new.py"), std::string::npos);
  WorkspaceLimits small;
  small.set_max_file_bytes(10);
  EXPECT_FALSE(Check(Ws({{"model_new.py", std::string(11, 'x')}}), "cuda", small).ok);
  small.set_max_file_bytes(100);
  small.set_max_total_bytes(15);
  EXPECT_FALSE(Check(Ws({{"model_new.py", "12345678"}, {"kernels/a.cu", "12345678"}}), "cuda", small).ok);
  EXPECT_FALSE(Check(Ws({{"model_new.py", kModel}, {"model_new.py", kModel}})).ok);
  EXPECT_FALSE(Check(Ws({{"model_new.py", kModel}, {"run.sh", "rm -rf /"}})).ok);
  EXPECT_FALSE(Check(Ws({{"model_new.py", kModel}, {"kernels/a.cu", ""}}), "cpu").ok);  // CUDA layout on CPU worker
}

TEST(WorkspaceTest, ForbiddenIncludesAreViolations) {
  for (const char* inc : {"#include <sys/socket.h>", "#include <unistd.h>", "  #  include <thread>",
                          "#include \"/etc/passwd\"", "#include \"../secret.h\"", "#include MACRO_HEADER",
                          "%:include \"/etc/passwd\"", "#embed \"data.bin\"", "#line 1 \"/etc/passwd\"",
                          "asm(\".incbin \\\"/etc/passwd\\\"\");"}) {
    Checked c = Check(Ws({{"model_new.py", kModel}, {"kernels/a.cu", std::string(inc) + "\n"}}));
    EXPECT_FALSE(c.ok) << inc;
    EXPECT_EQ(c.why.outcome, Verdict::SANDBOX_VIOLATION) << inc;
  }
  EXPECT_TRUE(Check(Ws({{"model_new.py", kModel},
                        {"kernels/a.cu", "#include <cuda_runtime.h>\n#include <cmath>\n#include \"common.cuh\"\n"},
                        {"kernels/common.cuh", "#include <cstdint>\n"}})).ok);
}

// Sources load_inline compiles live in model_new.py's strings: scanned in the
// inline layout only (elsewhere a .py is never compiled, and its prose may name
// the directives freely).
TEST(WorkspaceTest, InlineSourcesInPythonAreScanned) {
  const std::string inline_model =
      "from torch.utils.cpp_extension import load_inline\n"
      "src = '''\n#include \"/etc/shadow\"\n'''\nmod = load_inline(name='m', cpp_sources=src)\n";
  Checked bad = Check(Ws({{"model_new.py", inline_model}}));
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.why.outcome, Verdict::SANDBOX_VIOLATION) << bad.why.reason;
  EXPECT_NE(bad.why.reason.find("/etc/shadow"), std::string::npos) << bad.why.reason;
  const std::string prose = "\"\"\"Mentions #embed and .incbin in prose.\"\"\"\nimport torch\n";
  Checked fast = Check(Ws({{"model_new.py", prose}, {"kernels/a.cu", "__global__ void k() {}\n"}}));
  EXPECT_TRUE(fast.ok) << fast.why.reason;
  EXPECT_EQ(fast.ws.layout, Workspace::FAST_PATH);
}

TEST(WorkspaceTest, ContentHashIgnoresOrderButNotContent) {
  Checked a = Check(Ws({{"model_new.py", kModel}, {"kernels/a.cu", "1"}}));
  Checked b = Check(Ws({{"kernels/a.cu", "1"}, {"model_new.py", kModel}}));
  Checked c = Check(Ws({{"model_new.py", kModel}, {"kernels/a.cu", "2"}}));
  EXPECT_EQ(a.ws.content_hash, b.ws.content_hash);
  EXPECT_NE(a.ws.content_hash, c.ws.content_hash);
}

}  // namespace
}  // namespace kernelrl::sandbox
