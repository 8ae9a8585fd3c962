// The character rules names, labels and paths are checked with: controls and spaces refused,
// UTF-8 validated, with the position of the first bad byte.
#include "common/chars.h"

#include <catch2/catch.hpp>
#include <string>

namespace exa {
namespace {

TEST_CASE("control characters are found anywhere in a string", "[chars]") {
  CHECK_FALSE(HasAsciiControl(""));
  CHECK_FALSE(HasAsciiControl("v2 canary, é"));
  CHECK(HasAsciiControl("v2\n"));
  CHECK(HasAsciiControl(std::string("a\0b", 3)));
  CHECK(HasAsciiControl("tab\there"));
  CHECK(HasAsciiControl("del\x7f"));
  CHECK_FALSE(HasAsciiControl("\x80\xff"));  // bytes above ASCII are UTF-8's business
}

TEST_CASE("ids are one token: no spaces, no controls", "[chars]") {
  CHECK_FALSE(HasSpaceOrControl("tiny@v1-0"));
  CHECK(HasSpaceOrControl("tiny v1"));
  CHECK(HasSpaceOrControl("tiny\r"));
  CHECK_FALSE(HasSpaceOrControl(""));
}

TEST_CASE("OnlyAlnumOr and FindInvalidUtf8", "[chars]") {
  CHECK(OnlyAlnumOr("node-1.rack_a", "-._"));
  CHECK_FALSE(OnlyAlnumOr("node 1", "-._"));
  CHECK(FindInvalidUtf8("plain é €") == std::string_view::npos);
  CHECK(FindInvalidUtf8("ab\xc0\xaf") == 2);     // overlong '/'
  CHECK(FindInvalidUtf8("x\xed\xa0\x80") == 1);  // a surrogate
  CHECK(FindInvalidUtf8("\xe2\x82") == 0);       // cut short
}

}  // namespace
}  // namespace exa
