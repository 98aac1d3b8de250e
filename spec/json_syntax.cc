// Recursive descent over the JSON grammar, tracking line and column; nesting
// is bounded so hostile input cannot exhaust the stack.
#include "spec/json_syntax.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace trainyard::spec {
namespace {

class JsonChecker {
 public:
  JsonChecker(std::string_view text, int max_depth)
      : text_(text), max_depth_(max_depth) {}

  absl::Status Check() {
    SkipBlanks();
    if (!Value(0)) return error_;
    SkipBlanks();
    if (pos_ != text_.size()) {
      Fail("unexpected text after the end of the JSON object");
      return error_;
    }
    return absl::OkStatus();
  }

 private:
  bool Fail(std::string_view what) {
    int line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    error_ = absl::InvalidArgumentError(
        absl::StrCat("line ", line, ", column ", column, ": ",
                     absl::string_view(what.data(), what.size())));
    return false;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  void SkipBlanks() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' ||
                        Peek() == '\r')) {
      ++pos_;
    }
  }
  bool Literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) {
      return Fail(
          "expected a value (a string, number, object, array, true, "
          "false or null)");
    }
    pos_ += word.size();
    return true;
  }

  bool Value(int depth) {
    if (depth > max_depth_) return Fail("nested too deeply");
    switch (Peek()) {
      case '{':
        return Object(depth);
      case '[':
        return Array(depth);
      case '"':
        return String();
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      default:
        if (Peek() == '-' || absl::ascii_isdigit(Peek())) return Number();
        if (AtEnd()) return Fail("unexpected end of input, expected a value");
        return Fail(
            "expected a value (a string, number, object, array, true, "
            "false or null)");
    }
  }

  bool Object(int depth) {
    ++pos_;  // '{'
    SkipBlanks();
    if (Peek() == '}') return ++pos_, true;
    while (true) {
      SkipBlanks();
      if (Peek() != '"') return Fail("expected a quoted key");
      if (!String()) return false;
      SkipBlanks();
      if (Peek() != ':') return Fail("expected ':' after the key");
      ++pos_;
      SkipBlanks();
      if (!Value(depth + 1)) return false;
      SkipBlanks();
      if (Peek() == '}') return ++pos_, true;
      if (Peek() != ',') return Fail("expected ',' or '}'");
      ++pos_;
    }
  }

  bool Array(int depth) {
    ++pos_;  // '['
    SkipBlanks();
    if (Peek() == ']') return ++pos_, true;
    while (true) {
      SkipBlanks();
      if (!Value(depth + 1)) return false;
      SkipBlanks();
      if (Peek() == ']') return ++pos_, true;
      if (Peek() != ',') return Fail("expected ',' or ']'");
      ++pos_;
    }
  }

  bool String() {
    ++pos_;  // '"'
    while (!AtEnd()) {
      unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') return ++pos_, true;
      if (c < 0x20) return Fail("control character in a string");
      if (c == '\\') {
        ++pos_;
        char e = Peek();
        if (e == 'u') {
          for (int i = 1; i <= 4; ++i) {
            if (pos_ + i >= text_.size() ||
                !absl::ascii_isxdigit(text_[pos_ + i])) {
              return Fail("bad \\u escape");
            }
          }
          pos_ += 4;
        } else if (std::string_view("\"\\/bfnrt").find(e) ==
                       std::string_view::npos ||
                   AtEnd()) {
          return Fail("bad escape in a string");
        }
      }
      ++pos_;
    }
    return Fail("unterminated string");
  }

  bool Digits() {
    if (!absl::ascii_isdigit(Peek())) return Fail("bad number");
    while (absl::ascii_isdigit(Peek())) ++pos_;
    return true;
  }

  bool Number() {
    if (Peek() == '-') ++pos_;
    if (Peek() == '0') {
      ++pos_;
    } else if (!Digits()) {
      return false;
    }
    if (Peek() == '.') {
      ++pos_;
      if (!Digits()) return false;
    }
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (!Digits()) return false;
    }
    return true;
  }

  std::string_view text_;
  int max_depth_;
  size_t pos_ = 0;
  absl::Status error_;
};

}  // namespace

bool LooksLikeJson(std::string_view text) {
  size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{';
}

absl::Status CheckJsonSyntax(std::string_view text, int max_depth) {
  return JsonChecker(text, max_depth).Check();
}

}  // namespace trainyard::spec
