// JSON for the files and messages kernelrl reads and writes (config.json,
// tokenizer.json, safetensors headers, checkpoint manifests, tool calls, OpenAI
// API bodies): nlohmann's ordered_json from Debian's nlohmann-json3-dev.
//
// Objects keep their key order (tokenizer.json's vocab is read in file order,
// config.json is written back in its own order); integers are held as 64-bit
// integers, so they round-trip exactly. The library reports errors by throwing;
// the functions here are the tree's seam to it and turn those into absl::Status,
// so callers never see a JSON exception.
#ifndef KERNELRL_COMMON_JSON_H_
#define KERNELRL_COMMON_JSON_H_

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kernelrl {

using Json = nlohmann::ordered_json;

// RFC 8259 JSON. InvalidArgument names the byte offset of malformed input; an
// object that repeats a key is rejected too (which value is meant is ambiguous).
absl::StatusOr<Json> ParseJson(absl::string_view text);

// Compact (indent < 0) or pretty-printed. Bytes that are not UTF-8 inside
// strings become U+FFFD instead of an exception.
std::string DumpJson(const Json& value, int indent = -1);

// The JSON string literal for s, quotes included.
std::string JsonString(absl::string_view s);

// Object member or nullptr (also nullptr when `object` is not an object).
const Json* FindJson(const Json& object, absl::string_view key);

// The number as an integer (an integral float such as 3.0 counts); error if it
// is not one.
absl::StatusOr<int64_t> JsonInt(const Json& value);

// The number, or NaN when value is not one: DumpJson writes NaN and the
// infinities as null (JSON has neither), so a statistic that was NaN reads back
// as NaN rather than as an error.
double JsonNumber(const Json& value);

// Typed members with defaults for absent or null members; error on a wrong type.
absl::StatusOr<int64_t> GetJsonInt(const Json& object, absl::string_view key, int64_t def);
absl::StatusOr<double> GetJsonDouble(const Json& object, absl::string_view key, double def);
absl::StatusOr<bool> GetJsonBool(const Json& object, absl::string_view key, bool def);
absl::StatusOr<std::string> GetJsonString(const Json& object, absl::string_view key, std::string def);

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_JSON_H_
