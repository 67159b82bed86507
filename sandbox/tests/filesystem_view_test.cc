// SandboxConfig.view resolved against its defaults and checked
// (sandbox/filesystem_view.h): defaults in one place, configured lists
// replace them, bad paths refuse the worker naming field and path, missing
// ones are warned about by name.
#include "sandbox/filesystem_view.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <string>

#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "sandbox/contain/view_defaults.h"

namespace kernelrl::sandbox {
namespace {

SandboxConfig Config(const std::string& backend) {
  SandboxConfig c;
  c.set_backend(backend);
  return c;
}

std::string FreshPath() {
  std::random_device rd;
  return ::kernelrl::testing::TempDir() + "/view-" + std::to_string(rd()) + std::to_string(rd());
}

TEST(FilesystemViewTest, DefaultsOnCudaNothingGpuOnCpu) {
  absl::StatusOr<ResolvedView> cuda = ResolveFilesystemView(Config("cuda"));
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ(cuda->gpu_dev, DefaultGpuDevPaths());
  EXPECT_EQ(cuda->gpu_ro, DefaultGpuRoPaths());
  EXPECT_TRUE(cuda->extra_ro.empty());
  SandboxConfig cpu = Config("cpu");
  cpu.mutable_view()->add_gpu_dev_paths("relative/ignored/on/cpu");
  absl::StatusOr<ResolvedView> c = ResolveFilesystemView(cpu);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->gpu_dev.empty());
  EXPECT_TRUE(c->gpu_ro.empty());
}

TEST(FilesystemViewTest, ConfiguredListsReplaceTheDefaults) {
  const std::string dir = FreshPath();
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  SandboxConfig c = Config("cuda");
  c.mutable_view()->add_extra_ro_paths(dir);
  c.mutable_view()->add_gpu_dev_paths("/dev/null");
  c.mutable_view()->add_gpu_ro_paths(dir);
  absl::StatusOr<ResolvedView> v = ResolveFilesystemView(c);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->extra_ro, std::vector<std::string>{dir});
  EXPECT_EQ(v->gpu_dev, std::vector<std::string>{"/dev/null"});
  EXPECT_EQ(v->gpu_ro, std::vector<std::string>{dir});
  EXPECT_TRUE(v->warnings.empty()) << v->warnings[0];
  absl::StatusOr<std::vector<std::string>> args = ZygoteViewArgs(c);
  ASSERT_TRUE(args.ok());
  EXPECT_EQ(*args, (std::vector<std::string>{"--view-extra-ro", dir, "--view-gpu-dev", "/dev/null", "--view-gpu-ro", dir}));
  rmdir(dir.c_str());
}

TEST(FilesystemViewTest, BadPathsAreErrorsNamingFieldAndPath) {
  struct Case {
    const char* field;
    std::string path;
  };
  for (const Case& k : {Case{"extra_ro_paths", "opt/tools"}, Case{"extra_ro_paths", "/"},
                        Case{"gpu_dev_paths", "/dev/../etc/shadow"}, Case{"gpu_ro_paths", "/sys/a:/sys/b"},
                        Case{"extra_ro_paths", ""}}) {
    SandboxConfig c = Config("cuda");
    auto* view = c.mutable_view();
    (std::string(k.field) == "extra_ro_paths" ? view->add_extra_ro_paths()
     : std::string(k.field) == "gpu_dev_paths" ? view->add_gpu_dev_paths()
                                               : view->add_gpu_ro_paths())
        ->assign(k.path);
    absl::StatusOr<ResolvedView> v = ResolveFilesystemView(c);
    ASSERT_FALSE(v.ok()) << k.path;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find(std::string("SandboxConfig.view.") + k.field), std::string::npos)
        << v.status();
    EXPECT_NE(v.status().message().find("'" + k.path + "'"), std::string::npos) << v.status();
    EXPECT_FALSE(ZygoteViewArgs(c).ok());
  }
}

TEST(FilesystemViewTest, MissingPathsAreWarnedAboutByName) {
  const std::string missing = FreshPath();
  SandboxConfig c = Config("cuda");
  c.mutable_view()->add_extra_ro_paths(missing);
  c.mutable_view()->add_gpu_dev_paths(missing + "[0-9]*");
  c.mutable_view()->add_gpu_ro_paths("/proc");  // exists: the defaults would warn on a machine without a GPU
  absl::StatusOr<ResolvedView> v = ResolveFilesystemView(c);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->warnings.size(), 2u);
  EXPECT_NE(v->warnings[0].find(missing + " does not exist"), std::string::npos) << v->warnings[0];
  EXPECT_NE(v->warnings[1].find(missing + "[0-9]* matches nothing"), std::string::npos) << v->warnings[1];
  EXPECT_EQ(v->extra_ro, std::vector<std::string>{missing});  // left to the root plan, which lists it as missing
}

}  // namespace
}  // namespace kernelrl::sandbox
