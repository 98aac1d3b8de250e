// FromText: a proto message from its text format, for the client's tests
// (a parse error fails the test and yields an empty message).
#ifndef TRAINYARD_CLIENT_PROTO_TEXT_TEST_SUPPORT_H_
#define TRAINYARD_CLIENT_PROTO_TEXT_TEST_SUPPORT_H_

#include <string>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace trainyard::client {

template <typename T>
T FromText(const std::string& text) {
  T message;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &message))
      << text;
  return message;
}

}  // namespace trainyard::client

#endif  // TRAINYARD_CLIENT_PROTO_TEXT_TEST_SUPPORT_H_
