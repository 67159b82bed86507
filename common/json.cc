#include "common/json.h"

#include "common/text.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kernelrl {

Json Json::Bool(bool b) {
  Json j;
  j.type_ = Type::kBool;
  j.bool_ = b;
  return j;
}

Json Json::Number(double v) {
  Json j;
  j.type_ = Type::kNumber;
  j.str_ = absl::StrFormat("%.17g", v);
  return j;
}

Json Json::NumberText(std::string text) {
  Json j;
  j.type_ = Type::kNumber;
  j.str_ = std::move(text);
  return j;
}

Json Json::Int(int64_t v) {
  Json j;
  j.type_ = Type::kNumber;
  j.str_ = absl::StrCat(v);
  return j;
}

Json Json::String(std::string s) {
  Json j;
  j.type_ = Type::kString;
  j.str_ = std::move(s);
  return j;
}

Json Json::Array(std::vector<Json> items) {
  Json j;
  j.type_ = Type::kArray;
  j.items_ = std::move(items);
  return j;
}

Json Json::Object(std::vector<std::pair<std::string, Json>> members) {
  Json j;
  j.type_ = Type::kObject;
  j.members_ = std::move(members);
  return j;
}

double Json::number() const { return type_ == Type::kNumber ? std::strtod(str_.c_str(), nullptr) : 0.0; }

absl::StatusOr<int64_t> Json::AsInt() const {
  if (type_ != Type::kNumber) return absl::InvalidArgumentError("expected an integer, got a non-number");
  if (str_.find_first_of(".eE") == std::string::npos) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(str_.c_str(), &end, 10);
    if (errno == 0 && *end == '\0') return static_cast<int64_t>(v);
  }
  double d = number();
  if (std::floor(d) != d || std::fabs(d) > 9.007199254740992e15) {
    return absl::InvalidArgumentError(absl::StrCat("expected an integer, got ", str_));
  }
  return static_cast<int64_t>(d);
}

const Json* Json::Find(absl::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& [k, v] : members_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Json::Set(std::string key, Json value) {
  for (auto& [k, v] : members_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  members_.emplace_back(std::move(key), std::move(value));
}

absl::StatusOr<int64_t> Json::GetInt(absl::string_view key, int64_t def) const {
  const Json* v = Find(key);
  if (v == nullptr || v->is_null()) return def;
  auto r = v->AsInt();
  if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat("\"", key, "\": ", r.status().message()));
  return *r;
}

absl::StatusOr<double> Json::GetDouble(absl::string_view key, double def) const {
  const Json* v = Find(key);
  if (v == nullptr || v->is_null()) return def;
  if (!v->is_number()) return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be a number"));
  return v->number();
}

absl::StatusOr<bool> Json::GetBool(absl::string_view key, bool def) const {
  const Json* v = Find(key);
  if (v == nullptr || v->is_null()) return def;
  if (!v->is_bool()) return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be true or false"));
  return v->bool_value();
}

absl::StatusOr<std::string> Json::GetString(absl::string_view key, std::string def) const {
  const Json* v = Find(key);
  if (v == nullptr || v->is_null()) return def;
  if (!v->is_string()) return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" must be a string"));
  return v->str();
}

void AppendJsonString(absl::string_view s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

std::string Json::Dump(int indent) const {
  std::string out;
  DumpTo(&out, indent, 0);
  return out;
}

void Json::DumpTo(std::string* out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(indent * d), ' ');
  };
  switch (type_) {
    case Type::kNull: out->append("null"); break;
    case Type::kBool: out->append(bool_ ? "true" : "false"); break;
    case Type::kNumber: out->append(str_); break;
    case Type::kString: AppendJsonString(str_, out); break;
    case Type::kArray:
      out->push_back('[');
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) out->push_back(',');
        newline(depth + 1);
        items_[i].DumpTo(out, indent, depth + 1);
      }
      if (!items_.empty()) newline(depth);
      out->push_back(']');
      break;
    case Type::kObject:
      out->push_back('{');
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i) out->push_back(',');
        newline(depth + 1);
        AppendJsonString(members_[i].first, out);
        out->append(indent < 0 ? ":" : ": ");
        members_[i].second.DumpTo(out, indent, depth + 1);
      }
      if (!members_.empty()) newline(depth);
      out->push_back('}');
      break;
  }
}

namespace {

// Recursive-descent parser over the whole text; depth is bounded so a
// hostile file cannot blow the stack.
class Parser {
 public:
  explicit Parser(absl::string_view text) : s_(text) {}

  absl::StatusOr<Json> ParseDocument() {
    Json v;
    if (auto st = ParseValue(&v, 0); !st.ok()) return st;
    SkipSpace();
    if (pos_ != s_.size()) return Error("trailing characters after the JSON value");
    return v;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("JSON parse error at byte ", pos_, ": ", what));
  }

  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }

  bool Consume(absl::string_view lit) {
    if (s_.substr(pos_, lit.size()) == lit) {
      pos_ += lit.size();
      return true;
    }
    return false;
  }

  absl::Status ParseValue(Json* out, int depth) {
    if (depth > 512) return Error("nesting deeper than 512");
    SkipSpace();
    if (pos_ >= s_.size()) return Error("unexpected end of input");
    char c = s_[pos_];
    if (c == '{') return ParseObject(out, depth);
    if (c == '[') return ParseArray(out, depth);
    if (c == '"') {
      std::string str;
      if (auto st = ParseString(&str); !st.ok()) return st;
      *out = Json::String(std::move(str));
      return absl::OkStatus();
    }
    if (Consume("true")) { *out = Json::Bool(true); return absl::OkStatus(); }
    if (Consume("false")) { *out = Json::Bool(false); return absl::OkStatus(); }
    if (Consume("null")) { *out = Json::Null(); return absl::OkStatus(); }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
    return Error(absl::StrCat("unexpected character '", absl::string_view(&s_[pos_], 1), "'"));
  }

  absl::Status ParseNumber(Json* out) {
    size_t start = pos_;
    auto digits = [&] {
      size_t b = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ > b;
    };
    if (s_[pos_] == '-') ++pos_;
    if (!digits()) return Error("malformed number");
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digits()) return Error("malformed number fraction");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return Error("malformed number exponent");
    }
    *out = Json::NumberText(std::string(s_.substr(start, pos_ - start)));
    return absl::OkStatus();
  }

  absl::Status ParseHex4(uint32_t* v) {
    if (pos_ + 4 > s_.size()) return Error("truncated \\u escape");
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      *v <<= 4;
      if (c >= '0' && c <= '9') *v |= c - '0';
      else if (c >= 'a' && c <= 'f') *v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') *v |= c - 'A' + 10;
      else return Error("bad hex digit in \\u escape");
    }
    return absl::OkStatus();
  }



  absl::Status ParseString(std::string* out) {
    ++pos_;  // opening quote
    while (true) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return Error("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp;
          if (auto st = ParseHex4(&cp); !st.ok()) return st;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (!Consume("\\u")) return Error("unpaired high surrogate");
            if (auto st = ParseHex4(&lo); !st.ok()) return st;
            if (lo < 0xDC00 || lo > 0xDFFF) return Error("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Error("unpaired low surrogate");
          }
          ::kernelrl::AppendUtf8(cp, out);
          break;
        }
        default: return Error("unknown escape");
      }
    }
  }

  absl::Status ParseArray(Json* out, int depth) {
    ++pos_;
    *out = Json::Array();
    SkipSpace();
    if (Consume("]")) return absl::OkStatus();
    while (true) {
      Json item;
      if (auto st = ParseValue(&item, depth + 1); !st.ok()) return st;
      out->Push(std::move(item));
      SkipSpace();
      if (Consume(",")) continue;
      if (Consume("]")) return absl::OkStatus();
      return Error("expected ',' or ']' in array");
    }
  }

  absl::Status ParseObject(Json* out, int depth) {
    ++pos_;
    std::vector<std::pair<std::string, Json>> members;
    SkipSpace();
    if (Consume("}")) {
      *out = Json::Object();
      return absl::OkStatus();
    }
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a string key in object");
      std::string key;
      if (auto st = ParseString(&key); !st.ok()) return st;
      SkipSpace();
      if (!Consume(":")) return Error("expected ':' after object key");
      Json value;
      if (auto st = ParseValue(&value, depth + 1); !st.ok()) return st;
      members.emplace_back(std::move(key), std::move(value));
      SkipSpace();
      if (Consume(",")) continue;
      if (Consume("}")) break;
      return Error("expected ',' or '}' in object");
    }
    *out = Json::Object(std::move(members));
    return absl::OkStatus();
  }

  absl::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<Json> ParseJson(absl::string_view text) { return Parser(text).ParseDocument(); }

}  // namespace kernelrl
