// UTF-8: encoding one code point (the JSON writer's \u escapes, the
// character tokenizer), strict checking (protobuf refuses to parse a proto3
// string field that is not valid UTF-8, so text bound for one is checked
// before it is sent or stored) and repair (text from a process's output
// shown as a JSON string). Pure functions.
#ifndef TRAINYARD_COMMON_UTF8_H_
#define TRAINYARD_COMMON_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trainyard {

// Appends the UTF-8 encoding of `cp` (REQUIRES: cp <= 0x10FFFF).
void AppendUtf8(uint32_t cp, std::string* out);

// The length of the valid UTF-8 sequence starting at s[i] (1 to 4), or 0
// when none starts there: an overlong form, a surrogate, a code point past
// U+10FFFF, a stray continuation byte or a sequence cut short.
// REQUIRES: i < s.size().
size_t Utf8SequenceAt(std::string_view s, size_t i);

// True when `s` is valid UTF-8 throughout.
bool IsValidUtf8(std::string_view s);

// True when valid UTF-8 `s` holds a control character: C0 (below U+0020),
// DEL or C1 (U+0080-U+009F, which terminals take as escape sequences).
bool HasControlCharacter(std::string_view s);

// `s` with each byte that starts no valid sequence replaced by U+FFFD.
std::string ToValidUtf8(std::string_view s);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_UTF8_H_
