#include "sandbox/source_scan.h"

#include <cctype>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kernelrl::sandbox {
namespace {

bool IdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Translation phases 1-2 as far as a scan needs them: the trigraphs ??= and
// ??/ (harmless to replace where the compiler would not: the scan only gets
// stricter), then backslash (+ blanks) + newline removed.
std::string Spliced(const std::string& in) {
  std::string s;
  s.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in.compare(i, 3, "?\?=") == 0 || in.compare(i, 3, "?\?/") == 0) {
      s += in[i + 2] == '=' ? '#' : '\\';
      i += 2;
    } else {
      s += in[i];
    }
  }
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\') {
      size_t j = i + 1;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t' || s[j] == '\r')) ++j;
      if (j < s.size() && s[j] == '\n') {
        i = j;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// A preprocessing number (1'000'000, 0x1p-3, .5f) starts at s[i]: its
// digit separators are not character literals.
bool PpNumberStart(const std::string& s, size_t i) {
  return std::isdigit(static_cast<unsigned char>(s[i])) ||
         (s[i] == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])));
}

size_t PpNumberEnd(const std::string& s, size_t i) {
  size_t j = i + 1;
  while (j < s.size()) {
    const char d = s[j];
    if (IdentChar(d) || d == '.') {
      ++j;
    } else if (d == '\'' && j + 1 < s.size() && IdentChar(s[j + 1])) {
      j += 2;
    } else if ((d == '+' || d == '-') && std::strchr("eEpP", s[j - 1]) != nullptr) {
      ++j;
    } else {
      break;
    }
  }
  return j;
}

bool RawPrefix(const std::string& id) { return id == "R" || id == "LR" || id == "uR" || id == "UR" || id == "u8R"; }

// Copies a quoted literal starting at s[i] (the quote); stops after the
// closing quote or before a newline. Returns the index after it.
size_t CopyQuoted(const std::string& s, size_t i, std::string& out) {
  const char q = s[i];
  out += s[i++];
  while (i < s.size() && s[i] != '\n') {
    if (s[i] == '\\' && i + 1 < s.size()) {
      out.append(s, i, 2);
      i += 2;
      continue;
    }
    out += s[i];
    if (s[i++] == q) break;
  }
  return i;
}

// Phase 3: comments become one space (a directive continues across a block
// comment's newlines, as the compiler sees it). String and character
// literals are kept; raw strings too, their newlines turned into spaces so
// that every directive stays on one line. Digit separators (1'000) are not
// taken for character literals.
std::string WithoutComments(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const char c = s[i];
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') ++i;
      out += ' ';
    } else if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      const size_t end = s.find("*/", i + 2);
      i = end == std::string::npos ? n : end + 2;
      out += ' ';
    } else if (PpNumberStart(s, i)) {
      const size_t j = PpNumberEnd(s, i);
      out.append(s, i, j - i);
      i = j;
    } else if (IdentChar(c)) {
      size_t j = i;
      while (j < n && IdentChar(s[j])) ++j;
      const std::string id = s.substr(i, j - i);
      out += id;
      i = j;
      if (RawPrefix(id) && i < n && s[i] == '"') {
        const size_t open = s.find('(', i);
        const std::string delim = open == std::string::npos ? "" : s.substr(i + 1, open - i - 1);
        const size_t close = open == std::string::npos ? std::string::npos : s.find(")" + delim + "\"", open);
        const size_t end = close == std::string::npos ? n : close + delim.size() + 2;
        for (size_t k = i; k < end; ++k) out += s[k] == '\n' ? ' ' : s[k];
        i = end;
      }
    } else if (c == '"' || c == '\'') {
      i = CopyQuoted(s, i, out);
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

// The value of a literal's body (between the quotes), escapes decoded the
// way the compiler would for the characters that matter here ("\x2e" is '.').
std::string Decode(const std::string& body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out += body[i];
      continue;
    }
    const char e = body[++i];
    if (e == 'x') {
      int v = 0;
      while (i + 1 < body.size() && std::isxdigit(static_cast<unsigned char>(body[i + 1]))) {
        const char h = body[++i];
        v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      out += static_cast<char>(v);
    } else if (e >= '0' && e <= '7') {
      int v = e - '0';
      for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
        v = v * 8 + (body[++i] - '0');
      }
      out += static_cast<char>(v);
    } else {
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
    }
  }
  return out;
}

struct Token {
  enum Kind { kIdent, kString, kOther } kind;
  std::string text;  // identifier; decoded string value; punctuation/number
  size_t pos;        // offset in the line
};

// Tokens of one comment-free line: identifiers, string literals (prefixes
// u8/u/U/L/R dropped, adjacent ones left separate), everything else.
std::vector<Token> Lex(const std::string& line) {
  std::vector<Token> toks;
  size_t i = 0;
  while (i < line.size()) {
    const char c = line[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (PpNumberStart(line, i)) {
      const size_t j = PpNumberEnd(line, i);
      toks.push_back({Token::kOther, line.substr(i, j - i), i});
      i = j;
    } else if (IdentChar(c)) {
      size_t j = i;
      while (j < line.size() && IdentChar(line[j])) ++j;
      std::string id = line.substr(i, j - i);
      if (j < line.size() && line[j] == '"' && (id == "u8" || id == "u" || id == "U" || id == "L")) {
        i = j;  // a prefixed string: lexed below
        continue;
      }
      if (j < line.size() && line[j] == '"' && RawPrefix(id)) {
        const size_t open = line.find('(', j);
        const std::string delim = open == std::string::npos ? "" : line.substr(j + 1, open - j - 1);
        const size_t close = open == std::string::npos ? std::string::npos : line.find(")" + delim + "\"", open);
        const size_t end = close == std::string::npos ? line.size() : close + delim.size() + 2;
        const std::string body = open == std::string::npos ? "" : line.substr(open + 1, (close == std::string::npos ? line.size() : close) - open - 1);
        toks.push_back({Token::kString, body, i});
        i = end;
        continue;
      }
      toks.push_back({Token::kIdent, id, i});
      i = j;
    } else if (c == '"' || c == '\'') {
      std::string quoted;
      const size_t end = CopyQuoted(line, i, quoted);
      const size_t len = quoted.size() >= 2 && quoted.back() == c ? quoted.size() - 2 : quoted.size() - 1;
      toks.push_back({c == '"' ? Token::kString : Token::kOther, Decode(quoted.substr(1, len)), i});
      i = end;
    } else {
      toks.push_back({Token::kOther, std::string(1, c), i});
      ++i;
    }
  }
  return toks;
}

// The header name of an include-like argument ("<x>" or "\"x\""), or "" with
// `computed` set when it is neither (a macro).
std::string HeaderName(absl::string_view arg, bool* computed) {
  arg = absl::StripLeadingAsciiWhitespace(arg);
  *computed = false;
  if (arg.empty()) return "";
  const char open = arg[0];
  if (open != '<' && open != '"') {
    *computed = true;
    return "";
  }
  const size_t end = arg.find(open == '<' ? '>' : '"', 1);
  return std::string(arg.substr(1, end == absl::string_view::npos ? arg.size() - 1 : end - 1));
}

std::string OutsideWorkspace(const std::string& name, const std::string& what) {
  if (!name.empty() && name[0] == '/') return "absolute " + what + " <" + name + ">";
  if (absl::StrContains(name, "..")) return what + " escaping the workspace: " + name;
  return "";
}

bool ForbiddenHeader(const std::string& name) {
  for (const std::string& prefix : ForbiddenIncludePrefixes()) {
    // "sys/" forbids a directory; "thread" forbids exactly <thread>.
    const bool dir = prefix.back() == '/';
    if (name == prefix || (dir && absl::StartsWith(name, prefix))) return true;
  }
  return false;
}

// A directive line (after "#" or "%:"): the reason it is forbidden, or "".
// *include_like: the line names a file to read (its text is not scanned further).
std::string CheckDirective(absl::string_view rest, const std::string& line, bool* include_like) {
  rest = absl::StripLeadingAsciiWhitespace(rest);
  size_t n = 0;
  while (n < rest.size() && IdentChar(rest[n])) ++n;
  const std::string name(rest.substr(0, n));
  const absl::string_view arg = rest.substr(n);
  *include_like = name == "include" || name == "include_next" || name == "import" || name == "embed";
  if (name == "embed") return "#embed reads a file into the program: " + line;
  if (*include_like) {
    bool computed = false;
    const std::string header = HeaderName(arg, &computed);
    if (computed) return "computed include: " + line;
    if (std::string why = OutsideWorkspace(header, "include"); !why.empty()) return why;
    if (ForbiddenHeader(header)) return "forbidden include <" + header + ">";
    return "";
  }
  const bool line_marker = name == "line" || (!name.empty() && std::isdigit(static_cast<unsigned char>(name[0])));
  if (line_marker && absl::StrContains(arg, "\"")) {
    return "#line naming a file (diagnostics would quote that file): " + line;
  }
  if (name == "pragma" && absl::StrContains(absl::AsciiStrToLower(arg), "dependency")) {
    return "#pragma dependency reads another file: " + line;
  }
  return "";
}

// __has_include("x") / __has_include(<x>) at `pos` in `line`: its header name.
std::string HasIncludeArg(const std::string& line, size_t pos) {
  const size_t open = line.find('(', pos);
  if (open == std::string::npos) return "";
  bool computed = false;
  return HeaderName(absl::string_view(line).substr(open + 1), &computed);
}

bool AsmFileDirective(const std::string& text) {
  const std::string lower = absl::AsciiStrToLower(text);
  return absl::StrContains(lower, ".incbin") || absl::StrContains(lower, ".include");
}

}  // namespace

const std::vector<std::string>& ForbiddenIncludePrefixes() {
  // Process, network, dynamic loading, raw syscalls, threads and file
  // streams: a kernel and its launcher need none of them.
  static const auto* v = new std::vector<std::string>{
      "unistd.h", "sys/", "netinet/", "arpa/", "netdb.h", "net/", "linux/", "asm/", "spawn.h",
      "dlfcn.h", "pthread.h", "thread", "future", "fstream", "filesystem", "signal.h", "csignal",
      "fcntl.h", "dirent.h", "pwd.h", "ifaddrs.h", "syscall.h", "ptrace.h", "seccomp.h", "cuda/std/thread"};
  return *v;
}

std::string ForbiddenSourceConstruct(const std::string& source) {
  const std::string clean = WithoutComments(Spliced(source));
  std::string strings;  // adjacent string literals, concatenated as the compiler does
  for (absl::string_view view : absl::StrSplit(clean, '\n')) {
    const std::string line(view);
    absl::string_view s = absl::StripLeadingAsciiWhitespace(view);
    bool include_like = false;
    if (absl::ConsumePrefix(&s, "#") || absl::ConsumePrefix(&s, "%:")) {
      if (std::string why = CheckDirective(s, std::string(absl::StripAsciiWhitespace(view)), &include_like);
          !why.empty()) {
        return why;
      }
    }
    if (include_like) continue;
    const std::vector<Token> toks = Lex(line);
    for (size_t t = 0; t < toks.size(); ++t) {
      const Token& tok = toks[t];
      if (tok.kind == Token::kString) {
        strings += tok.text;
        if (AsmFileDirective(strings)) return "assembler directive reading a file in a string: \"" + strings.substr(0, 120) + "\"";
        continue;
      }
      strings.clear();
      if (tok.kind != Token::kIdent) continue;
      if (absl::AsciiStrToLower(tok.text) == "incbin") return "incbin (the assembler reads a file into the program)";
      if (tok.text == "__has_embed") return "__has_embed probes files for #embed";
      if (tok.text == "__has_include" || tok.text == "__has_include_next") {
        if (std::string why = OutsideWorkspace(HasIncludeArg(line, tok.pos), "__has_include"); !why.empty()) {
          return why;
        }
      }
      if (tok.text == "_Pragma" && t + 2 < toks.size() && toks[t + 2].kind == Token::kString &&
          absl::StrContains(absl::AsciiStrToLower(toks[t + 2].text), "dependency")) {
        return "_Pragma dependency reads another file";
      }
    }
  }
  return "";
}

std::string ForbiddenEmbeddedSource(const std::string& python_source) {
  const std::string s = Spliced(python_source);
  if (absl::StrContains(absl::AsciiStrToLower(s), ".incbin")) return ".incbin (the assembler reads a file into the program)";
  // Every "#" or "%:" followed by a file-reading directive, wherever it is
  // (a line of a triple-quoted string, or after a "\n" escape).
  for (size_t i = 0; i < s.size(); ++i) {
    size_t j;
    if (s[i] == '#') {
      j = i + 1;
    } else if (s.compare(i, 2, "%:") == 0) {
      j = i + 2;
    } else {
      continue;
    }
    while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
    size_t k = j;
    while (k < s.size() && IdentChar(s[k])) ++k;
    const std::string name = s.substr(j, k - j);
    if (name == "embed") return "#embed reads a file into the program";
    if (name != "include" && name != "include_next" && name != "import") continue;
    while (k < s.size() && (s[k] == ' ' || s[k] == '\t' || s[k] == '\\')) ++k;
    if (k >= s.size() || (s[k] != '"' && s[k] != '<')) continue;
    const size_t end = s.find_first_of(s[k] == '<' ? ">\n" : "\"\n\\", k + 1);
    const std::string header = s.substr(k + 1, (end == std::string::npos ? s.size() : end) - k - 1);
    if (std::string why = OutsideWorkspace(header, "include"); !why.empty()) return why;
  }
  return "";
}

}  // namespace kernelrl::sandbox
