#include "common/gpu_presence.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace kernelrl {
namespace {

std::string FreshDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string d = std::string(t ? t : "/tmp") + "/dev_" + std::to_string(std::random_device{}());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

void Touch(const std::string& path) { std::ofstream(path) << ""; }

TEST(GpuPresenceTest, OnlyNumberedNodesCount) {
  const std::string dev = FreshDir();
  EXPECT_FALSE(GpuDevicePresent(dev));
  for (const char* node : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia", "nvidia0a", "null"}) {
    Touch(dev + "/" + node);
  }
  EXPECT_FALSE(GpuDevicePresent(dev)) << "driver control nodes exist without a GPU";
  Touch(dev + "/nvidia" + std::to_string(std::random_device{}() % 16));
  EXPECT_TRUE(GpuDevicePresent(dev));
  EXPECT_FALSE(GpuDevicePresent(dev + "/missing"));
}

}  // namespace
}  // namespace kernelrl
