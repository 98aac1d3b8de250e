// UTF-8 encoding of one code point, shared by the JSON writer (\u escapes)
// and the character tokenizer. Pure function.
#ifndef TRAINYARD_COMMON_UTF8_H_
#define TRAINYARD_COMMON_UTF8_H_

#include <cstdint>
#include <string>

namespace trainyard {

// Appends the UTF-8 encoding of `cp` (REQUIRES: cp <= 0x10FFFF).
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_UTF8_H_
