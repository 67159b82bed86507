#include "common/file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace kernelrl {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string d = std::string(t ? t : "/tmp") + "/" + name + "_" + std::to_string(std::random_device{}());
  fs::create_directories(d);
  return d;
}

TEST(FileTest, ReadsBackEveryByte) {
  std::mt19937 rng(std::random_device{}());
  std::string data(1 + rng() % 200000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  const std::string path = FreshDir("read") + "/blob";
  ASSERT_TRUE(WriteFileAtomically(path, data).ok());
  absl::StatusOr<std::string> back = ReadFileToString(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, data);
  EXPECT_TRUE(absl::IsNotFound(ReadFileToString(path + ".missing").status()));
}

// A candidate's tree: nested dirs, a symlink to a file outside and to a
// directory outside (both must survive), a directory chmod 000.
TEST(FileTest, RemoveTreeNeverFollowsLinksAndOpensLockedDirs) {
  std::mt19937 rng(std::random_device{}());
  const std::string outside = FreshDir("outside");
  std::ofstream(outside + "/keep.txt") << "keep";
  const std::string root = FreshDir("tree");
  std::string dir = root;
  const int depth = 2 + rng() % 4;
  for (int i = 0; i < depth; ++i) {
    dir += "/d" + std::to_string(rng() % 100);
    fs::create_directories(dir);
    for (int f = 0; f < 1 + static_cast<int>(rng() % 5); ++f) std::ofstream(dir + "/f" + std::to_string(f)) << rng();
  }
  fs::create_symlink(outside + "/keep.txt", dir + "/link_to_file");
  fs::create_symlink(outside, dir + "/link_to_dir");
  fs::create_directories(root + "/locked/inner");
  std::ofstream(root + "/locked/inner/x") << "x";
  ASSERT_EQ(chmod((root + "/locked/inner").c_str(), 0), 0);
  ASSERT_EQ(chmod((root + "/locked").c_str(), 0), 0);

  const absl::Status s = RemoveTree(root);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_FALSE(fs::exists(fs::symlink_status(root)));
  EXPECT_TRUE(fs::exists(outside + "/keep.txt"));
  EXPECT_TRUE(RemoveTree(root).ok()) << "a missing tree is already removed";
  EXPECT_FALSE(RemoveTree("/").ok());
  EXPECT_FALSE(RemoveTree("/tmp").ok());
  EXPECT_FALSE(RemoveTree("").ok());
}

// An existing directory is fine (callers re-run over their own trees); a
// missing parent is an error that keeps errno's meaning and names the path.
TEST(FileTest, MakeDirAcceptsExistingAndNamesFailures) {
  const std::string dir = FreshDir("mkdir") + "/d" + std::to_string(std::random_device{}());
  ASSERT_TRUE(MakeDir(dir, 0700).ok());
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(MakeDir(dir, 0755).ok());
  const absl::Status missing = MakeDir(dir + "/no/such", 0700);
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  EXPECT_NE(missing.message().find(dir + "/no/such"), absl::string_view::npos) << missing;
}

}  // namespace
}  // namespace kernelrl
