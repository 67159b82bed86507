#include "common/json.h"

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kernelrl {

absl::StatusOr<Json> ParseJson(absl::string_view text) {
  // One key set per open object; the parser calls back at each key, and a
  // repeated one aborts the parse (a callback can only stop it by throwing).
  std::vector<std::set<std::string>> open_objects;
  std::string repeated;
  auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case Json::parse_event_t::object_end: open_objects.pop_back(); break;
      case Json::parse_event_t::key:
        if (!open_objects.back().insert(parsed.get<std::string>()).second) {
          repeated = parsed.get<std::string>();
          throw std::invalid_argument(repeated);
        }
        break;
      default: break;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("JSON parse error at byte ", e.byte, ": ", e.what()));
  } catch (const std::invalid_argument&) {
    return absl::InvalidArgumentError(absl::StrCat("JSON object key \"", repeated, "\" is given twice"));
  }
}

std::string DumpJson(const Json& value, int indent) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

std::string JsonString(absl::string_view s) { return DumpJson(Json(std::string(s))); }

const Json* FindJson(const Json& object, absl::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(std::string(key));
  return it == object.end() ? nullptr : &*it;
}

absl::StatusOr<int64_t> JsonInt(const Json& value) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return absl::InvalidArgumentError(absl::StrCat("integer ", DumpJson(value), " does not fit 64 bits"));
    }
    return value.get<int64_t>();
  }
  if (!value.is_number()) return absl::InvalidArgumentError("expected an integer, got a non-number");
  const double d = value.get<double>();
  if (std::floor(d) != d || std::fabs(d) > 9.007199254740992e15) {
    return absl::InvalidArgumentError(absl::StrCat("expected an integer, got ", DumpJson(value)));
  }
  return static_cast<int64_t>(d);
}

double JsonNumber(const Json& value) {
  return value.is_number() ? value.get<double>() : std::numeric_limits<double>::quiet_NaN();
}

namespace {

// The member, or nullptr when absent or null (both mean "use the default").
const Json* Present(const Json& object, absl::string_view key) {
  const Json* v = FindJson(object, key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

}  // namespace

absl::StatusOr<int64_t> GetJsonInt(const Json& object, absl::string_view key, int64_t def) {
  const Json* v = Present(object, key);
  if (v == nullptr) return def;
  auto r = JsonInt(*v);
  if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat("\"", key, "\": ", r.status().message()));
  return *r;
}

absl::StatusOr<double> GetJsonDouble(const Json& object, absl::string_view key, double def) {
  const Json* v = Present(object, key);
  if (v == nullptr) return def;
  if (!v->is_number()) return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be a number"));
  return v->get<double>();
}

absl::StatusOr<bool> GetJsonBool(const Json& object, absl::string_view key, bool def) {
  const Json* v = Present(object, key);
  if (v == nullptr) return def;
  if (!v->is_boolean()) return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be true or false"));
  return v->get<bool>();
}

absl::StatusOr<std::string> GetJsonString(const Json& object, absl::string_view key, std::string def) {
  const Json* v = Present(object, key);
  if (v == nullptr) return def;
  if (!v->is_string()) return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be a string"));
  return v->get<std::string>();
}

}  // namespace kernelrl
