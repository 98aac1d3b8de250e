// Strict UTF-8 checking. Protobuf refuses to parse a proto3 string field
// that is not valid UTF-8, so text bound for a spec's string fields is
// checked before it is sent or stored. Stateless; thread-safe.
#ifndef TRAINYARD_SPEC_UTF8_H_
#define TRAINYARD_SPEC_UTF8_H_

#include <string_view>

namespace trainyard::spec {

// True when `s` is valid UTF-8: no overlong forms, surrogates or code
// points past U+10FFFF.
bool IsValidUtf8(std::string_view s);

}  // namespace trainyard::spec

#endif  // TRAINYARD_SPEC_UTF8_H_
