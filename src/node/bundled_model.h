// The model shipped with ExaServe (models/exa-tiny-arith): what a node serves when its config
// names none, and what the model-level health probe knows the answer of.
// Thread-safety: FindBundledModel only reads the file system; safe from any thread.
#pragma once

#include <string>

namespace exa::node {

// The model shipped in models/ (it adds numbers: the probe "1+1=" must answer "2").
inline constexpr char kBundledModelName[] = "exa-tiny-arith";

// Where the bundled model is: next to the binary (build tree or install prefix) or under the
// current directory. Empty when none is found.
std::string FindBundledModel();

}  // namespace exa::node
