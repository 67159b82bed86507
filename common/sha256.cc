#include "common/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace kernelrl {

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // EVP_Digest fails only on allocation failure or a broken libcrypto; a wrong
  // hash would silently mix cache entries, so stop instead.
  if (EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr) != 1 || len != 32) std::abort();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return out;
}

}  // namespace kernelrl
