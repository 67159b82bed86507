#include "common/sha256.h"

#include <cstdlib>
#include <random>
#include <string>

#include "common/file.h"
#include "gtest/gtest.h"

namespace kernelrl {
namespace {

// FIPS 180-4 example vectors (one block, two blocks, a million bytes).
TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Embedded NULs count (task hashes join source and input policy with "\0"),
// and any changed byte changes the hash.
TEST(Sha256Test, EveryByteCounts) {
  std::mt19937 rng(std::random_device{}());
  std::string data(1 + rng() % 4096, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  const std::string h = Sha256Hex(data);
  EXPECT_EQ(h.size(), 64u);
  EXPECT_EQ(h, Sha256Hex(data));
  std::string changed = data;
  changed[rng() % changed.size()] ^= static_cast<char>(1 + rng() % 255);
  EXPECT_NE(h, Sha256Hex(changed));
  EXPECT_NE(Sha256Hex(std::string("a\0b", 3)), Sha256Hex(std::string("a\0c", 3)));
}

// A file hashes as its bytes do, across the chunk boundary (1 MiB); a missing one is an error.
TEST(Sha256Test, AFileHashesAsItsBytes) {
  std::mt19937 rng(std::random_device{}());
  std::string data((1 << 20) + 1 + rng() % 4096, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/weights.bin";
  ASSERT_TRUE(WriteFileAtomically(path, data).ok());
  auto h = Sha256FileHex(path);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(*h, Sha256Hex(data));
  EXPECT_EQ(Sha256FileHex(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kernelrl
