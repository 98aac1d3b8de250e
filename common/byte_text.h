// Byte counts as people read them: "512 B", "4.0 KiB", "1.2 GiB". Pure
// functions; thread-safe.
#ifndef TRAINYARD_COMMON_BYTE_TEXT_H_
#define TRAINYARD_COMMON_BYTE_TEXT_H_

#include <cstdint>
#include <string>

namespace trainyard {

// Binary units, one decimal past bytes; zero or negative: "0 B".
std::string FormatBytes(int64_t bytes);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_BYTE_TEXT_H_
