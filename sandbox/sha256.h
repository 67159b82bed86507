// Sha256Hex: SHA-256 (FIPS 180-4) of a byte string, lower-case hex. Keys the
// compile cache; written here because the worker links no crypto library.
#ifndef KERNELRL_SANDBOX_SHA256_H_
#define KERNELRL_SANDBOX_SHA256_H_

#include <string>
#include <string_view>

namespace kernelrl::sandbox {

std::string Sha256Hex(std::string_view data);

}  // namespace kernelrl::sandbox

#endif  // KERNELRL_SANDBOX_SHA256_H_
