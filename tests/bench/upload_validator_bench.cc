// Upload validator throughput (server/storage/upload_validator.h) on random
// float32 rows sent in 1 MiB chunks, and the statistics pass alone:
//   upload_validator_bench validate|stats ROWS COLS [REPS] [constant]
// "constant" makes column 0 constant, the statistics' worst case (the
// comparison then runs over every row). Prints GB/s of validated bytes.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "server/storage/upload_validator.h"
int main(int argc, char** argv) {
  const std::string mode = argv[1];
  const int64_t rows = std::stoll(argv[2]), cols = std::stoll(argv[3]);
  std::vector<float> x(rows * cols);
  std::mt19937 g(1);
  std::normal_distribution<float> n;
  for (auto& v : x) v = n(g);
  // "constant": column 0 never varies, the statistics' worst case.
  if (argc > 5 && std::string(argv[5]) == "constant") {
    for (int64_t i = 0; i < rows; ++i) x[i * cols] = 1.0f;
  }
  const char* bytes = reinterpret_cast<const char*>(x.data());
  const size_t total = x.size() * 4, chunk = 1 << 20;
  const auto t0 = std::chrono::steady_clock::now();
  const int reps = argc > 4 ? std::stoi(argv[4]) : 5;
  for (int rep = 0; rep < reps; ++rep) {
    if (mode == "validate") {
      dendro::server::UploadValidator v;
      if (!v.Begin(rows, cols, false, int64_t{1} << 40).ok()) return 1;
      for (size_t off = 0; off < total; off += chunk) {
        if (!v.Data(std::string_view(bytes + off, std::min(chunk, total - off))).ok()) return 2;
      }
    } else {
      dendro::server::UploadStats s;
      s.Begin(rows, cols, false);
      s.AddFloats(0, x.data(), rows * cols);
    }
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: %.2f GB/s\n", mode.c_str(), double(reps) * total / sec / 1e9);
}
