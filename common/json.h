// A small JSON document model for the files and messages kernelrl reads and writes:
// config.json, tokenizer.json, safetensors headers, checkpoint manifests.
//
// Contract: Parse() accepts RFC 8259 JSON (UTF-8, \uXXXX escapes with
// surrogate pairs) and rejects anything else with an InvalidArgument naming
// the byte offset. Objects keep their key order (tokenizer.json's vocab is
// read in file order) and lookups are by linear scan or an index built on
// first use. Numbers keep their text so 64-bit integers round-trip exactly.
#ifndef KERNELRL_COMMON_JSON_H_
#define KERNELRL_COMMON_JSON_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kernelrl {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  Json() = default;
  static Json Null() { return Json(); }
  static Json Bool(bool b);
  static Json Number(double v);
  static Json Int(int64_t v);
  // A number from its (already validated) JSON text, kept verbatim.
  static Json NumberText(std::string text);
  static Json String(std::string s);
  static Json Array(std::vector<Json> items = {});
  static Json Object(std::vector<std::pair<std::string, Json>> members = {});

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  bool bool_value() const { return bool_; }
  double number() const;
  // The number as an integer; error if it is not one (or not a number).
  absl::StatusOr<int64_t> AsInt() const;
  const std::string& str() const { return str_; }  // string value, or number text.
  const std::vector<Json>& items() const { return items_; }
  const std::vector<std::pair<std::string, Json>>& members() const { return members_; }

  // Object member or nullptr (also nullptr when this is not an object).
  const Json* Find(absl::string_view key) const;
  void Set(std::string key, Json value);  // Appends or replaces (objects only).
  void Push(Json value) { items_.push_back(std::move(value)); }

  // Typed getters with defaults for absent or null members; error on a wrong type.
  absl::StatusOr<int64_t> GetInt(absl::string_view key, int64_t def) const;
  absl::StatusOr<double> GetDouble(absl::string_view key, double def) const;
  absl::StatusOr<bool> GetBool(absl::string_view key, bool def) const;
  absl::StatusOr<std::string> GetString(absl::string_view key, std::string def) const;

  // Compact (indent < 0) or pretty-printed serialization.
  std::string Dump(int indent = -1) const;

 private:
  void DumpTo(std::string* out, int indent, int depth) const;

  Type type_ = Type::kNull;
  bool bool_ = false;
  std::string str_;
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

absl::StatusOr<Json> ParseJson(absl::string_view text);
// Appends the JSON string literal for s (quotes included) to out.
void AppendJsonString(absl::string_view s, std::string* out);

}  // namespace kernelrl

#endif  // KERNELRL_COMMON_JSON_H_
