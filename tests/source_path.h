// SourcePath: files of the source tree (goldens, fixtures) for tests.
//
// The checkout's location is compiled into one small file
// (tests/source_path.cc), not into every test: a define in each test would
// make ccache miss every test file whenever the checkout moves, as it does
// between CI's clean clones.
#ifndef DENDRO_TESTS_SOURCE_PATH_H_
#define DENDRO_TESTS_SOURCE_PATH_H_

#include <string>
#include <string_view>

namespace dendro {

// The path of `relative` (e.g. "tests/golden/l2h/") inside the source tree.
std::string SourcePath(std::string_view relative);

}  // namespace dendro

#endif  // DENDRO_TESTS_SOURCE_PATH_H_
